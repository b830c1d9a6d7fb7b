// How the controller reaches the real API server: one HTTP stack for calls and watches, with
// credentials that rotate (a token file, an exec plugin after a 401, a client certificate file
// replaced), a kubeconfig server with a
// trailing slash, HTTPS_PROXY through a CONNECT proxy, idle connections closed by the client, and
// a watch the API server refuses saying why, and 429s (load shed) sent again after Retry-After.
import { chmodSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { CoreV1Api, KubeConfig, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { ApiClient, ApiError, MAX_THROTTLED_RETRIES } from "../../src/runtime/api-client.js";
import { openssl, signClientCertificate } from "../harness/certificates.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { freePort } from "../harness/processes.js";
import { startConnectProxy } from "./connect-proxy.js";
import { startFreezableProxy } from "./freezable-proxy.js";
import { succeedRun } from "./scripted-runs.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  eventually,
  spawnControllerProcess,
  startController,
  waitForFinished,
} from "./support.js";
import { type SeenRequest, startThrottlingProxy } from "./throttling-proxy.js";

const { core, kubeConfig: admin } = clients();
const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
const scratch = mkdtempSync(path.join(tmpdir(), "pb-http-"));
const cluster = admin.getCurrentCluster();
const adminUser = admin.getCurrentUser();
if (!cluster || !adminUser) throw new Error("the test kubeconfig names no cluster or user");
const server = new URL(cluster.server);
let namespace = "";
/** The controller's service account: the tokens the tests rotate are its. */
const account = "pb-http-controller";
const bindings: string[] = [];

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-http");
  await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: account } } });
  const binding = `${namespace}-controller`;
  await rbac.createClusterRoleBinding({
    body: {
      metadata: { name: binding },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
      subjects: [{ kind: "ServiceAccount", name: account, namespace }],
    },
  });
  bindings.push(binding);
});

afterAll(async () => {
  for (const name of bindings) await rbac.deleteClusterRoleBinding({ name }).catch(() => {});
  await deleteTestNamespace(core, namespace);
  rmSync(scratch, { recursive: true, force: true });
});

/** A token of the controller's service account, valid while the Secret `bound` exists. */
async function boundToken(bound: string): Promise<string> {
  await core.createNamespacedSecret({ namespace, body: { metadata: { name: bound } } });
  const request = await core.createNamespacedServiceAccountToken({
    namespace,
    name: account,
    body: {
      spec: {
        audiences: [],
        expirationSeconds: 3600,
        boundObjectRef: { apiVersion: "v1", kind: "Secret", name: bound },
      },
    },
  });
  const token = request.status?.token;
  if (!token) throw new Error("the TokenRequest returned no token");
  return token;
}

/** Deletes the Secret the token is bound to, and waits until the API server refuses the token. */
async function revoke(bound: string, token: string): Promise<void> {
  await core.deleteNamespacedSecret({ namespace, name: bound });
  const probe = new KubeConfig();
  probe.loadFromOptions({
    clusters: [cluster as NonNullable<typeof cluster>],
    users: [{ name: "probe", token }],
    contexts: [{ name: "probe", cluster: cluster?.name ?? "", user: "probe" }],
    currentContext: "probe",
  });
  const api = probe.makeApiClient(CoreV1Api);
  await eventually(`the token bound to ${bound} to be refused`, async () => {
    const refused = await api.listNamespacedPod({ namespace, limit: 1 }).then(
      () => false,
      (error: { code?: number }) => error.code === 401,
    );
    return refused || undefined;
  });
}

/** Replaces a file at once, as the kubelet swaps a projected token (a rename, never a half-written file). */
function replaceFile(file: string, content: string): void {
  writeFileSync(`${file}.new`, content);
  renameSync(`${file}.new`, file);
}

function writeKubeconfig(
  name: string,
  user: Record<string, unknown>,
  serverUrl = cluster?.server ?? "",
): string {
  const file = path.join(scratch, `${name}.kubeconfig`);
  writeFileSync(
    file,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "test", cluster: { server: serverUrl, "certificate-authority": cluster?.caFile } }],
      users: [{ name: "controller", user }],
      contexts: [{ name: "test", context: { cluster: "test", user: "controller", namespace } }],
      "current-context": "test",
    }),
  );
  return file;
}

/** `playbook controller` as a process on the given kubeconfig, watching the test namespace. */
async function controllerProcess(kubeconfig: string, env: Record<string, string> = {}) {
  const port = await freePort();
  return spawnControllerProcess(
    ["--namespaces", namespace, "--leader-election=false", "--metrics-address", `127.0.0.1:${port}`],
    { KUBECONFIG: kubeconfig, PLAYBOOK_LOG_LEVEL: "info", PLAYBOOK_LOG_FORMAT: "json", ...env },
  );
}

/** A Playbook whose pod (on the scripted node) starts and reports success: the controller must see both. */
async function expectSucceeded(name: string, output: () => string) {
  await createPlaybook(namespace, name, { tasks: [{ name: "t", run: "true" }] });
  await succeedRun(core, namespace, name).catch((error: unknown) => {
    throw new Error(`${String(error)}\ncontroller output:\n${output().slice(-3000)}`);
  });
  const finished = await waitForFinished(namespace, name, 60_000).catch((error: unknown) => {
    throw new Error(`${String(error)}\ncontroller output:\n${output().slice(-3000)}`);
  });
  expect(condition(finished, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
}

describe("credentials that rotate", () => {
  it("reads a kubeconfig's token-file again when it changes: a run after the old token was revoked succeeds", async () => {
    const file = path.join(scratch, "token");
    const first = await boundToken("token-file-1");
    writeFileSync(file, first);
    const controller = await controllerProcess(writeKubeconfig("token-file", { "token-file": file }));
    try {
      await expectSucceeded("before-rotation", controller.output);
      replaceFile(file, await boundToken("token-file-2"));
      await revoke("token-file-1", first);
      await expectSucceeded("after-rotation", controller.output);
    } finally {
      controller.child.kill("SIGTERM");
      await controller.exited;
    }
  });

  it("runs an exec plugin again after a 401 and sends the refused call once more with its new token", async () => {
    const tokenFile = path.join(scratch, "exec-token");
    const runs = path.join(scratch, "exec-runs");
    const plugin = path.join(scratch, "credential-plugin.sh");
    writeFileSync(runs, "");
    writeFileSync(
      plugin,
      [
        "#!/bin/sh",
        'echo run >> "$PLUGIN_RUNS"',
        'printf \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}\\n\' "$(cat "$PLUGIN_TOKEN")"',
        "",
      ].join("\n"),
    );
    chmodSync(plugin, 0o755);
    const first = await boundToken("exec-1");
    writeFileSync(tokenFile, first);
    const kubeconfig = writeKubeconfig("exec", {
      exec: {
        apiVersion: "client.authentication.k8s.io/v1",
        command: plugin,
        interactiveMode: "Never",
        env: [
          { name: "PLUGIN_TOKEN", value: tokenFile },
          { name: "PLUGIN_RUNS", value: runs },
        ],
      },
    });
    const controller = await controllerProcess(kubeconfig);
    const pluginRuns = () => readFileSync(runs, "utf8").split("\n").filter(Boolean).length;
    try {
      await expectSucceeded("before-401", controller.output);
      // The credential has no expiry: only a 401 makes the controller run the plugin again.
      const before = pluginRuns();
      expect(before).toBe(1);
      replaceFile(tokenFile, await boundToken("exec-2"));
      await revoke("exec-1", first);
      await expectSucceeded("after-401", controller.output);
      expect(pluginRuns()).toBeGreaterThan(before);
      // The 401 was answered by a retry with the new token, not shown to the user.
      const events = await eventsOf(namespace, "after-401", ["PodCreated"]);
      expect(events.map((event) => event.reason)).not.toContain("FailedCreate");
    } finally {
      controller.child.kill("SIGTERM");
      await controller.exited;
    }
  });
});

describe("a client certificate that rotates", () => {
  it("the calls after the files are replaced, and the watches once re-opened, present the new certificate", async () => {
    // Two identities the API server tells apart by the certificate's CN; only the one bound at
    // each step may do anything, so a call or watch with the other certificate is refused 403.
    const ca = {
      caFile: cluster?.caFile ?? "",
      caKeyFile: path.join(path.dirname(cluster?.caFile ?? ""), "ca.key"),
    };
    const [old, renewed] = await Promise.all(
      ["old", "new"].map((which) =>
        signClientCertificate(scratch, `cert-${which}`, `/CN=${namespace}-${which}`, ca),
      ),
    );
    const bind = async (which: string) => {
      const name = `${namespace}-${which}`;
      await rbac.createClusterRoleBinding({
        body: {
          metadata: { name },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
          subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name }],
        },
      });
      bindings.push(name);
      return name;
    };
    const certFile = path.join(scratch, "client.crt");
    const keyFile = path.join(scratch, "client.key");
    writeFileSync(certFile, readFileSync(old?.certFile ?? ""));
    writeFileSync(keyFile, readFileSync(old?.keyFile ?? ""));
    const oldBinding = await bind("old");
    const files = new KubeConfig();
    files.loadFromOptions({
      clusters: [cluster as NonNullable<typeof cluster>],
      users: [{ name: "rotating", certFile, keyFile }],
      contexts: [{ name: "rotating", cluster: cluster?.name ?? "", user: "rotating" }],
      currentContext: "rotating",
    });
    // Through a proxy that can cut every connection, the watches' too, as a network blip does.
    const proxy = await startFreezableProxy(files);
    const running = startController([namespace], { leaderElection: false }, proxy.kubeConfig);
    const why = () => running.controller.readiness().reason;
    try {
      await expectSucceeded("before-cert-rotation", why);
      // The rotation: new files (key first, as cert-manager's csi driver writes), the new
      // identity bound and the old one's binding gone.
      await bind("new");
      replaceFile(keyFile, readFileSync(renewed?.keyFile ?? "", "utf8"));
      replaceFile(certFile, readFileSync(renewed?.certFile ?? "", "utf8"));
      await rbac.deleteClusterRoleBinding({ name: oldBinding });
      await revokedFor(old?.certFile ?? "", old?.keyFile ?? "");
      // The Playbook reaches the controller on the watch opened before; its pod and status are
      // written by calls with the new certificate (the old one may do nothing any more).
      await expectSucceeded("after-cert-rotation", why);
      // Every connection cut: the watches are opened again, with the new certificate.
      await proxy.cut();
      await proxy.restore();
      await eventually("the controller to be ready again", async () => running.controller.ready || undefined);
      await expectSucceeded("after-reconnect", why);
      expect(why()).not.toMatch(new RegExp(`${namespace}-old`));
    } finally {
      await running.stop();
      await proxy.close();
    }
  });
});

describe("a CA file that rotates", () => {
  it("is read again when replaced: a controller that did not trust the server connects once the file names the right CA", async () => {
    // A CA bundle that first holds another CA (as a rotation half done), then the cluster's.
    const otherKey = path.join(scratch, "other-ca.key");
    const otherCa = path.join(scratch, "other-ca.crt");
    await openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", otherKey]);
    await openssl([
      "req",
      "-x509",
      "-new",
      "-key",
      otherKey,
      "-subj",
      "/CN=another-ca",
      "-days",
      "1",
      "-out",
      otherCa,
    ]);
    const bundle = path.join(scratch, "ca-bundle.crt");
    writeFileSync(bundle, readFileSync(otherCa));
    const rotating = new KubeConfig();
    rotating.loadFromOptions({
      clusters: [{ ...(cluster as NonNullable<typeof cluster>), caFile: bundle }],
      users: admin.users,
      contexts: admin.contexts,
      currentContext: admin.getCurrentContext(),
    });
    const running = startController([namespace], { leaderElection: false }, rotating);
    const why = () => running.controller.readiness().reason;
    try {
      await eventually("the controller to refuse the server's certificate", async () =>
        /certificate/i.test(why()) ? true : undefined,
      );
      replaceFile(bundle, readFileSync(cluster?.caFile ?? "", "utf8"));
      await eventually(
        "the controller to be ready",
        async () => running.controller.ready || undefined,
        30_000,
      );
      await expectSucceeded("after-ca-rotation", why);
    } finally {
      await running.stop();
    }
  });
});

/** Waits until the API server refuses the certificate's user (its RBAC binding deleted). */
async function revokedFor(certFile: string, keyFile: string): Promise<void> {
  const probe = new KubeConfig();
  probe.loadFromOptions({
    clusters: [cluster as NonNullable<typeof cluster>],
    users: [{ name: "probe", certFile, keyFile }],
    contexts: [{ name: "probe", cluster: cluster?.name ?? "", user: "probe" }],
    currentContext: "probe",
  });
  const api = probe.makeApiClient(CoreV1Api);
  await eventually("the old certificate's user to be refused", async () => {
    const refused = await api.listNamespacedPod({ namespace, limit: 1 }).then(
      () => false,
      (error: { code?: number }) => error.code === 403,
    );
    return refused || undefined;
  });
}

describe("the kubeconfig's server", () => {
  it("with a trailing slash: watches work, so a Playbook created after start-up runs", async () => {
    const slashed = new KubeConfig();
    slashed.loadFromOptions({
      clusters: [{ ...(cluster as NonNullable<typeof cluster>), server: `${server.origin}/` }],
      users: admin.users,
      contexts: admin.contexts,
      currentContext: admin.getCurrentContext(),
    });
    const running = startController([namespace], { leaderElection: false }, slashed);
    try {
      await eventually(
        "the controller to be ready (its caches listed and watching)",
        async () => running.controller.ready || undefined,
        20_000,
      ).catch((error: unknown) => {
        throw new Error(`${String(error)}: ${running.controller.readiness().reason}`);
      });
      await expectSucceeded("slashed-server", () => running.controller.readiness().reason);
    } finally {
      await running.stop();
    }
  });

  it("behind HTTPS_PROXY: every call and watch goes through the proxy's CONNECT tunnel", async () => {
    // The server's name resolves nowhere on this machine: only the proxy reaches it.
    const hidden = `kubernetes.default.svc.cluster.local:${server.port}`;
    const proxy = await startConnectProxy({ host: server.hostname, port: Number(server.port) });
    const kubeconfig = writeKubeconfig(
      "proxied",
      { "client-certificate": adminUser?.certFile, "client-key": adminUser?.keyFile },
      `https://${hidden}`,
    );
    const controller = await controllerProcess(kubeconfig, {
      HTTPS_PROXY: proxy.url,
      NO_PROXY: "example.invalid",
    });
    try {
      await expectSucceeded("through-proxy", controller.output);
      expect(proxy.tunnels.length).toBeGreaterThan(0);
      expect(new Set(proxy.tunnels.map((tunnel) => tunnel.target))).toEqual(new Set([hidden]));
    } finally {
      controller.child.kill("SIGTERM");
      await controller.exited;
      await proxy.close();
    }
  });
});

describe("kept-alive connections", () => {
  it("are closed by the client once idle, before the API server would drop them", async () => {
    const hidden = `kubernetes.default.svc.cluster.local:${server.port}`;
    const proxy = await startConnectProxy({ host: server.hostname, port: Number(server.port) });
    const proxied = new KubeConfig();
    proxied.loadFromOptions({
      clusters: [{ ...(cluster as NonNullable<typeof cluster>), server: `https://${hidden}` }],
      users: admin.users,
      contexts: admin.contexts,
      currentContext: admin.getCurrentContext(),
    });
    const api = new ApiClient(proxied, 30_000, { env: { HTTPS_PROXY: proxy.url }, idleSocketMs: 500 });
    try {
      await api.listPage(`/api/v1/namespaces/${namespace}/pods`, { limit: 1 });
      await api.listPage(`/api/v1/namespaces/${namespace}/pods`, { limit: 1 });
      // One connection for both calls (kept alive), then closed by the client when idle.
      expect(proxy.tunnels).toHaveLength(1);
      const tunnel = proxy.tunnels[0];
      await eventually("the idle connection to close", async () => tunnel?.closedBy, 10_000);
      expect(tunnel?.closedBy).toBe("client");
    } finally {
      api.close();
      await proxy.close();
    }
  });
});

describe("a watch the API server refuses", () => {
  it("says what the API server said, not only the status code", async () => {
    // A user that may list Playbooks and pods but not watch them.
    const reader = "pb-http-lister";
    await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: reader } } });
    const rules = [
      { apiGroups: ["playbook.dev"], resources: ["playbooks", "playbookpolicies"], verbs: ["get", "list"] },
      { apiGroups: [""], resources: ["pods"], verbs: ["get", "list"] },
    ];
    await rbac.createNamespacedRole({ namespace, body: { metadata: { name: reader }, rules } });
    await rbac.createNamespacedRoleBinding({
      namespace,
      body: {
        metadata: { name: reader },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: reader },
        subjects: [{ kind: "ServiceAccount", name: reader, namespace }],
      },
    });
    const request = await core.createNamespacedServiceAccountToken({
      namespace,
      name: reader,
      body: { spec: { audiences: [], expirationSeconds: 3600 } },
    });
    const lister = new KubeConfig();
    lister.loadFromOptions({
      clusters: [cluster as NonNullable<typeof cluster>],
      users: [{ name: reader, token: request.status?.token ?? "" }],
      contexts: [{ name: reader, cluster: cluster?.name ?? "", user: reader }],
      currentContext: reader,
    });
    const running = startController([namespace], { leaderElection: false }, lister);
    try {
      const reason = await eventually("the controller to say why its watch failed", async () => {
        const why = running.controller.readiness().reason;
        return /watch failed/.test(why) ? why : undefined;
      });
      expect(reason).toMatch(
        new RegExp(
          `watch failed: 403 (playbooks\\.playbook\\.dev|pods) is forbidden: User "system:serviceaccount:${namespace}:${reader}" cannot watch resource`,
        ),
      );
    } finally {
      await running.stop();
    }
  });
});

describe("an API server shedding load (429 with Retry-After)", () => {
  /** The gaps between a 429 and the next request of the same kind, per kind that was throttled. */
  function waitsAfter429(seen: SeenRequest[]): Map<string, number[]> {
    const waits = new Map<string, number[]>();
    seen.forEach((request, index) => {
      if (request.status !== 429) return;
      const next = seen.slice(index + 1).find((later) => later.kind === request.kind);
      if (next) waits.set(request.kind, [...(waits.get(request.kind) ?? []), next.at - request.at]);
    });
    return waits;
  }

  it("a run still settles: every call, list and watch is sent again after Retry-After, and counted", async () => {
    const proxy = await startThrottlingProxy(admin, { times: 2, retryAfterSeconds: 2 });
    const running = startController([namespace], { leaderElection: false }, proxy.kubeConfig);
    try {
      await expectSucceeded("throttled", () => running.controller.readiness().reason);
      const waits = waitsAfter429(proxy.seen);
      const pods = `/api/v1/namespaces/${namespace}/pods`;
      const playbooks = `/apis/playbook.dev/v1alpha1/namespaces/${namespace}/playbooks`;
      // The list and watch of the caches, the pod's create and the status write were each
      // refused twice and sent again, each time no sooner than the 2 s the API server asked.
      for (const kind of [
        `GET ${pods}`,
        `GET ${playbooks}?watch`,
        `POST ${pods}`,
        `PUT ${playbooks}/throttled/status`,
      ]) {
        expect(waits.get(kind), kind).toHaveLength(2);
        for (const wait of waits.get(kind) ?? []) expect(wait, kind).toBeGreaterThanOrEqual(1_990);
      }
      // No call gave up on a 429: each kind refused (events too, written after the status) is
      // answered by the API server in the end.
      const throttled = proxy.seen.filter((request) => request.status === 429);
      await eventually("every refused kind of request to be sent again and answered", async () => {
        const answered = (kind: string) =>
          proxy.seen.some((request) => request.kind === kind && request.status !== 429);
        return throttled.every(({ kind }) => answered(kind)) || undefined;
      });
      const metric = await running.controller.metrics.registry.getSingleMetricAsString(
        "playbook_api_throttled_total",
      );
      const refusals = proxy.seen.filter((request) => request.status === 429).length;
      expect(metric).toContain(`playbook_api_throttled_total ${refusals}`);
    } finally {
      await running.stop();
      await proxy.close();
    }
  });

  it(`gives up after ${MAX_THROTTLED_RETRIES} retries with the API server's 429`, async () => {
    const proxy = await startThrottlingProxy(admin, { times: 1000, retryAfterSeconds: 0 });
    const api = new ApiClient(proxy.kubeConfig);
    try {
      const refused = await api
        .listPage(`/api/v1/namespaces/${namespace}/pods`, { limit: 1 })
        .catch((e) => e);
      expect(refused).toBeInstanceOf(ApiError);
      expect((refused as ApiError).code).toBe(429);
      expect((refused as ApiError).message).toMatch(/: 429 Too many requests, please try again later\.$/);
      expect(proxy.seen).toHaveLength(MAX_THROTTLED_RETRIES + 1);
    } finally {
      api.close();
      await proxy.close();
    }
  });

  it("never waits past the call's deadline or its abort signal", async () => {
    const proxy = await startThrottlingProxy(admin, { times: 1000, retryAfterSeconds: 5 });
    const path = `/api/v1/namespaces/${namespace}/pods`;
    const shortDeadline = new ApiClient(proxy.kubeConfig, 1_000);
    const api = new ApiClient(proxy.kubeConfig);
    try {
      // A wait of 5 s cannot end within a 1 s deadline: the 429 is the answer at once.
      let started = performance.now();
      const refused = await shortDeadline.listPage(path, { limit: 1 }).catch((e) => e);
      expect((refused as ApiError).code).toBe(429);
      expect(performance.now() - started).toBeLessThan(1_000);
      expect(proxy.seen).toHaveLength(1);
      // Within the deadline, the wait ends when the caller aborts.
      started = performance.now();
      const aborted = await api
        .listPage(path, { limit: 1 }, { signal: AbortSignal.timeout(500) })
        .catch((e) => e);
      expect(aborted).toBeInstanceOf(Error);
      expect(aborted).not.toBeInstanceOf(ApiError);
      expect(performance.now() - started).toBeLessThan(2_000);
      expect(proxy.seen).toHaveLength(2);
    } finally {
      shortDeadline.close();
      api.close();
      await proxy.close();
    }
  });
});
