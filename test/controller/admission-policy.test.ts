// The ValidatingAdmissionPolicy of the plain install (deploy/admission-policy.yaml) on the real
// API server: a user who may create Playbooks but not read a Secret is refused a Playbook or
// CronPlaybook naming it, with a message naming that Secret alone (not the ones they may read) and
// the permission; one who may read it is not, up to 8 names of each kind; the controller's own
// creates pass.
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { repoRoot } from "../harness/binaries.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { clients, eventually, kubectl, kubectlResult, playbookManifest } from "./support.js";

const { core } = clients();
const POLICY_FILE = path.join(repoRoot(), "deploy", "admission-policy.yaml");
const CONTROLLER = "system:serviceaccount:playbook-system:playbook-controller";
let namespace: string;

const author = {
  apiVersion: "rbac.authorization.k8s.io/v1",
  kind: "Role",
  metadata: { name: "playbook-author" },
  rules: [{ apiGroups: ["playbook.dev"], resources: ["playbooks", "cronplaybooks"], verbs: ["*"] }],
};
const readsDb = {
  apiVersion: "rbac.authorization.k8s.io/v1",
  kind: "Role",
  metadata: { name: "reads-db" },
  rules: [
    { apiGroups: [""], resources: ["secrets"], resourceNames: ["db"], verbs: ["get"] },
    { apiGroups: [""], resources: ["configmaps", "persistentvolumeclaims"], verbs: ["get"] },
  ],
};
const EIGHT = ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"];
const readsPublic = {
  apiVersion: "rbac.authorization.k8s.io/v1",
  kind: "Role",
  metadata: { name: "reads-public" },
  rules: [
    {
      apiGroups: [""],
      resources: ["secrets"],
      resourceNames: ["public", ...EIGHT],
      verbs: ["get"],
    },
  ],
};
const binding = (role: string, user: string) => ({
  apiVersion: "rbac.authorization.k8s.io/v1",
  kind: "RoleBinding",
  metadata: { name: `${role}-${user.replace(/[^a-z0-9]/g, "-")}` },
  roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: role },
  subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: user }],
});

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-vap");
  const objects = [
    author,
    readsDb,
    readsPublic,
    binding("playbook-author", "alice"),
    binding("reads-public", "alice"),
    binding("playbook-author", "carol"),
    binding("reads-public", "carol"),
    binding("reads-db", "carol"),
    binding("playbook-author", "bob"),
    binding("reads-db", "bob"),
    binding("playbook-author", CONTROLLER),
    {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "db" },
      stringData: { password: "hunter2-not-shown" },
    },
  ];
  await kubectl(["-n", namespace, "apply", "-f", "-"], {
    input: objects.map((o) => stringify(o)).join("---\n"),
  });
  await kubectl(["apply", "-f", POLICY_FILE]);
});
afterAll(async () => {
  await kubectlResult(["delete", "--ignore-not-found", "-f", POLICY_FILE]);
  await deleteTestNamespace(core, namespace);
});

const namingDb = {
  tasks: [
    {
      name: "dump",
      run: "pg_dump",
      env: [{ name: "PGPASSWORD", valueFrom: { secretKeyRef: { name: "db", key: "password" } } }],
    },
  ],
};
const asUser = (user: string, manifest: unknown, ...flags: string[]) =>
  kubectlResult(["--as", user, "-n", namespace, "create", ...flags, "-f", "-"], stringify(manifest));

describe("the admission policy", () => {
  it("refuses a Playbook naming a Secret its author cannot get, naming the Secret and the permission", async () => {
    // The API server loads a new policy within a second or so: tried without being stored until then.
    await eventually("the policy to be in force", async () => {
      const result = await asUser("alice", playbookManifest("alice-dump", namingDb), "--dry-run=server");
      return result.code !== 0 ? result : undefined;
    });
    const refused = await asUser("alice", playbookManifest("alice-dump", namingDb));
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(
      `user "alice" cannot get secrets "db" in namespace "${namespace}" (RBAC: get on secrets), so a Playbook of theirs may not name it`,
    );
  });

  it("names the first Secret its author cannot get, not the ones they may", async () => {
    const naming = (...names: string[]) => ({
      tasks: [
        {
          name: "dump",
          run: "pg_dump",
          env: names.map((name, i) => ({ name: `S${i}`, valueFrom: { secretKeyRef: { name, key: "k" } } })),
        },
      ],
    });
    const refused = await asUser("alice", playbookManifest("alice-both", naming("public", "db", "other")));
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(
      `user "alice" cannot get secrets "db" in namespace "${namespace}" (RBAC: get on secrets), so a Playbook of theirs may not name it`,
    );
    expect(refused.stderr).not.toContain('"public"');
    expect(refused.stderr).not.toContain('"other"');
    const readable = await asUser(
      "alice",
      playbookManifest("alice-public", naming("public")),
      "--dry-run=server",
    );
    expect(readable.stderr).toBe("");
    // Each name is checked once, however often it is named; 8 distinct names fit the policy's
    // budget, a ninth is refused, saying so.
    const eight = await asUser(
      "alice",
      playbookManifest("alice-eight", naming(...EIGHT, ...EIGHT)),
      "--dry-run=server",
    );
    expect(eight.stderr).toBe("");
    const nine = await asUser("alice", playbookManifest("alice-nine", naming(...EIGHT, "public")));
    expect(nine.code).not.toBe(0);
    expect(nine.stderr).toContain(
      `a Playbook may name at most 8 secrets, each checked against its author's RBAC; this one names 9: "p0", "p1"`,
    );
  });

  it("admits 8 names of each kind its author may get, within the API server's cost limits", async () => {
    const volumes = EIGHT.flatMap((n) => [
      { name: `c-${n}`, configMap: { name: `cfg-${n}` } },
      { name: `v-${n}`, persistentVolumeClaim: { claimName: `claim-${n}` } },
    ]);
    const manifest = playbookManifest("carol-all", {
      volumes,
      tasks: [
        {
          name: "all",
          run: "true",
          env: EIGHT.map((n, i) => ({ name: `S${i}`, valueFrom: { secretKeyRef: { name: n, key: "k" } } })),
        },
      ],
    });
    const admitted = await asUser("carol", manifest, "--dry-run=server");
    expect(admitted.stderr).toBe("");
  });

  it("refuses a CronPlaybook's template naming a Secret in a volume, a ConfigMap or a claim its author cannot get", async () => {
    const cron = {
      apiVersion: "playbook.dev/v1alpha1",
      kind: "CronPlaybook",
      metadata: { name: "alice-nightly" },
      spec: {
        schedule: "0 3 * * *",
        template: {
          spec: {
            volumes: [
              { name: "creds", secret: { secretName: "db" } },
              { name: "dumps", persistentVolumeClaim: { claimName: "dumps" } },
            ],
            tasks: [
              {
                name: "up",
                run: "true",
                envFrom: [{ configMapRef: { name: "cfg" } }],
                volumeMounts: [{ name: "creds", mountPath: "/creds" }],
              },
            ],
          },
        },
      },
    };
    const refused = await asUser("alice", cron);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(`user "alice" cannot get secrets "db" in namespace "${namespace}"`);
    // One message at a time, the first rule refused: with the Secret readable the others show.
    const cfgOnly = structuredClone(cron);
    cfgOnly.metadata.name = "alice-cfg";
    cfgOnly.spec.template.spec.volumes = [
      cron.spec.template.spec.volumes[1] as (typeof cron.spec.template.spec.volumes)[0],
    ];
    cfgOnly.spec.template.spec.tasks = [
      { name: "up", run: "true", envFrom: [{ configMapRef: { name: "cfg" } }], volumeMounts: [] },
    ];
    const cfg = await asUser("alice", cfgOnly);
    expect(cfg.stderr).toMatch(
      new RegExp(
        `user "alice" cannot get (configmaps "cfg"|persistentvolumeclaims "dumps") in namespace "${namespace}"`,
      ),
    );
  });

  it("admits the same Playbook from a user who may get the Secret, and any Playbook naming none", async () => {
    const bob = await asUser("bob", playbookManifest("bob-dump", namingDb));
    expect(bob.stderr).toBe("");
    const plain = await asUser(
      "alice",
      playbookManifest("alice-plain", { tasks: [{ name: "a", run: "true" }] }),
    );
    expect(plain.stderr).toBe("");
  });

  it("admits the controller's own creates (a CronPlaybook's runs)", async () => {
    const created = await asUser(CONTROLLER, playbookManifest("nightly-29000000", namingDb));
    expect(created.stderr).toBe("");
  });
});
