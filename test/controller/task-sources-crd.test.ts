// What the API server refuses of a task's Secrets, ConfigMaps and volumes through the CRD's
// schema and CEL rules, naming the field, and what it keeps of a spec that names them: the real
// kube-apiserver with crds/ installed.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  ENV_FROM_OF_BOTH_KINDS,
  FIELD_THE_POD_DOES_NOT_GIVE,
  VALUE_FROM_OF_TWO_SOURCES,
  VOLUME_OF_TWO_TYPES,
} from "../unit/refused-task-sources.js";
import { clients, getPlaybook, kubectl, kubectlResult, playbookManifest } from "./support.js";

const { core } = clients();
let namespace: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-sources");
});
afterAll(() => deleteTestNamespace(core, namespace));

const apply = (name: string, spec: Record<string, unknown>) =>
  kubectlResult(["-n", namespace, "apply", "-f", "-"], stringify(playbookManifest(name, spec)));

const secretEnv = { name: "PGPASSWORD", valueFrom: { secretKeyRef: { name: "db", key: "password" } } };

describe("a Playbook naming Secrets, ConfigMaps and volumes", () => {
  it("is stored with every field it names", async () => {
    const spec = {
      volumes: [
        { name: "dumps", persistentVolumeClaim: { claimName: "dumps" } },
        { name: "creds", secret: { secretName: "s3", items: [{ key: "id", path: "id" }] } },
      ],
      tasks: [
        {
          name: "dump",
          run: "pg_dump",
          env: [secretEnv, { name: "POD", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } }],
          envFrom: [{ configMapRef: { name: "cfg" }, prefix: "CFG_" }],
          volumeMounts: [{ name: "dumps", mountPath: "/dumps" }],
        },
      ],
      finally: [
        {
          name: "upload",
          run: "true",
          volumeMounts: [{ name: "creds", mountPath: "/etc/creds", readOnly: true }],
        },
      ],
    };
    const applied = await apply("stored", spec);
    expect(applied.stderr).toBe("");
    const stored = await getPlaybook(namespace, "stored");
    expect(stored.spec.volumes).toEqual(spec.volumes);
    expect(stored.spec.tasks).toEqual([
      {
        ...spec.tasks[0],
        retries: 0,
        env: spec.tasks[0]?.env.map((e) => ({ ...e, value: "" })),
      },
    ]);
    expect((stored.spec.finally as unknown[])[0]).toMatchObject({
      volumeMounts: spec.finally[0]?.volumeMounts,
    });
  });

  it.each([
    [
      "a hostPath volume",
      { volumes: [{ name: "root", hostPath: { path: "/" } }], tasks: [{ name: "a", run: "true" }] },
      "spec.volumes[0].hostPath: Invalid value: spec.volumes[].hostPath is not allowed: a volume must be one of secret, configMap, persistentVolumeClaim, emptyDir, projected, downwardAPI, ephemeral, csi",
    ],
    [
      "a volume of two types",
      VOLUME_OF_TWO_TYPES,
      "spec.volumes[0]: Invalid value: spec.volumes[] must name exactly one volume type",
    ],
    [
      "a volume named as the pod's own",
      { volumes: [{ name: "playbook-run", emptyDir: {} }], tasks: [{ name: "a", run: "true" }] },
      'spec.volumes[0].name: Invalid value: "playbook-run": spec.volumes[].name must not be plan, workspace, serviceaccount-token or start with playbook-',
    ],
    [
      "a mount over the workspace",
      {
        volumes: [{ name: "v", emptyDir: {} }],
        tasks: [{ name: "a", run: "true", volumeMounts: [{ name: "v", mountPath: "/workspace" }] }],
      },
      "spec.tasks[0].volumeMounts[0].mountPath: Invalid value: spec.tasks[].volumeMounts[].mountPath must not be, sit under or shadow /workspace, /playbook or /var/run/secrets/kubernetes.io/serviceaccount",
    ],
    [
      "a finally task's mount above the service account's token",
      {
        volumes: [{ name: "v", emptyDir: {} }],
        tasks: [{ name: "a", run: "true" }],
        finally: [{ name: "f", run: "true", volumeMounts: [{ name: "v", mountPath: "/var/run/secrets" }] }],
      },
      "spec.finally[0].volumeMounts[0].mountPath: Invalid value: spec.finally[].volumeMounts[].mountPath must not be, sit under or shadow",
    ],
    [
      "an env with value and valueFrom",
      { tasks: [{ name: "a", run: "true", env: [{ ...secretEnv, value: "hunter2" }] }] },
      "spec.tasks[0].env[0]: Invalid value: spec.tasks[].env[].valueFrom must not be set together with value",
    ],
    [
      "a valueFrom of two sources",
      VALUE_FROM_OF_TWO_SOURCES,
      "spec.tasks[0].env[0].valueFrom: Invalid value: spec.tasks[].env[].valueFrom must name exactly one of secretKeyRef, configMapKeyRef and fieldRef",
    ],
    [
      "a field the pod does not give",
      FIELD_THE_POD_DOES_NOT_GIVE,
      'spec.tasks[0].env[0].valueFrom.fieldRef.fieldPath: Invalid value: "spec.nodeName"',
    ],
    [
      "an envFrom of both kinds",
      ENV_FROM_OF_BOTH_KINDS,
      "spec.tasks[0].envFrom[0]: Invalid value: spec.tasks[].envFrom[] must name exactly one of secretRef and configMapRef",
    ],
  ])("refuses %s, naming the field", async (_case, spec, says) => {
    const refused = await apply("refused", spec);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(says);
  });

  it("refuses a volume type it does not know, naming the field", async () => {
    const refused = await apply("nfs", {
      volumes: [{ name: "v", nfs: { server: "x", path: "/" } }],
      tasks: [{ name: "a", run: "true" }],
    });
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('unknown field "spec.volumes[0].nfs"');
  });

  it("is explained field by field", async () => {
    const explain = async (field: string) => (await kubectl(["explain", field])).stdout.replace(/\s+/g, " ");
    expect(await explain("playbook.spec.tasks.env.valueFrom")).toContain(
      "set by the kubelet on this task's container only",
    );
    expect(await explain("playbook.spec.tasks.volumeMounts")).toContain(
      "mounted in this task's container only",
    );
    expect(await explain("cronplaybook.spec.template.spec.volumes")).toContain("(never hostPath;");
    expect(await explain("playbookpolicy.spec.allowedVolumes")).toContain(
      "Volume types the namespace's Playbooks may name",
    );
  });
});
