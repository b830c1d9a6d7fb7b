// Reading an archived log back (docs/log-archive.md#reading-an-archived-log), the suite that
// test/controller/log-api.test.ts runs beside the scripted node and test/real-node/log-api.test.ts
// beside the real one (whose API server dials the log API out of the node's network namespace).
// The controller serves the aggregated API logs.playbook.dev through the real kube-apiserver's
// aggregation layer, from objects in SeaweedFS at the keys of a real Playbook whose pods are gone.
// A user granted `get playbooklogs` reads every byte, through `playbook logs` and `kubectl get
// --raw`; a user without it is refused by the API server, and by the controller itself when a
// request reaches it with the API server's front-proxy certificate but for a user RBAC does not
// allow.
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { stringify } from "yaml";
import { LOG_API_GROUP, LOG_API_RESOURCE, LOG_API_VERSION } from "../../src/api/log-archive.js";
import { GROUP, PLURAL } from "../../src/api/playbook.js";
import { attemptLogKey } from "../../src/controller/log-archive/archive-keys.js";
import type { ArchiveStore } from "../../src/controller/log-archive/archive-store.js";
import { REFUSED_BY_LOG_API } from "../../src/controller/log-archive/log-api.js";
import { makeClients } from "../../src/runtime/kube-config.js";
import { signClientCertificate } from "../harness/certificates.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  frontProxyClientOf,
  logApiEndpoint,
  logApiServingCertificate,
  registerLogApi,
} from "../harness/log-api.js";
import { type ObjectStore, startObjectStore } from "../harness/object-store.js";
import { freePort } from "../harness/processes.js";
import { startCli } from "../support/cli.js";
import { clients, createPlaybook, kubectl, type RunningController, startController } from "./support.js";

export function logApiSuite(): void {
  const { core, kubeConfig } = clients();
  const { api } = makeClients(kubeConfig);
  const PREFIX = "logs/";
  const NAME = "nightly";

  let dir = "";
  let namespace = "";
  let controllerNamespace = "";
  let objectStore: ObjectStore;
  let archive: ArchiveStore;
  let controller: RunningController;
  let address = "";
  let port = 0;
  let unregister: (() => Promise<void>) | undefined;
  let stopRelays: (() => Promise<void>) | undefined;
  const kubeconfigOf: Record<string, string> = {};
  /** Each attempt's archived bytes. */
  const archived: Record<number, Buffer> = {};

  const sha256 = (data: Buffer | string) => createHash("sha256").update(data).digest("hex");
  const logPath = (name: string, attempt?: number) =>
    `/apis/${LOG_API_GROUP}/${LOG_API_VERSION}/namespaces/${namespace}/${LOG_API_RESOURCE}/${name}${attempt === undefined ? "" : `?attempt=${attempt}`}`;

  /** An attempt's output as the runner prints it: runner lines and `[task] ` lines, `bytes` long or more. */
  function attemptOutput(attempt: number, bytes: number): Buffer {
    const lines = [`playbook: attempt ${attempt} started`];
    let size = 0;
    for (let i = 0; size < bytes; i++) {
      const line = `[${i % 3 === 0 ? "test" : "build"}] attempt ${attempt} line ${i} ${"x".repeat(i % 97)}`;
      lines.push(line);
      size += line.length + 1;
    }
    lines.push(`playbook: attempt ${attempt} ended`);
    return Buffer.from(`${lines.join("\n")}\n`);
  }

  /** A kubeconfig whose user is `user`, with a client certificate the cluster's CA signed. */
  async function kubeconfigFor(user: string): Promise<string> {
    const pki = path.join(path.dirname(inject("kubeconfig")), "pki");
    const cert = await signClientCertificate(dir, user, `/CN=${user}`, {
      caFile: path.join(pki, "ca.crt"),
      caKeyFile: path.join(pki, "ca.key"),
    });
    const cluster = kubeConfig.getCurrentCluster();
    const file = path.join(dir, `${user}.kubeconfig`);
    writeFileSync(
      file,
      stringify({
        apiVersion: "v1",
        kind: "Config",
        clusters: [
          { name: "test", cluster: { server: cluster?.server, "certificate-authority": cluster?.caFile } },
        ],
        users: [{ name: user, user: { "client-certificate": cert.certFile, "client-key": cert.keyFile } }],
        contexts: [{ name: "test", context: { cluster: "test", user, namespace } }],
        "current-context": "test",
      }),
    );
    return file;
  }

  /** A Role with the rules a user reading runs has, and `get playbooklogs` when `archive`, bound to `user`. */
  async function grant(user: string, archive: boolean): Promise<void> {
    const rules = [
      { apiGroups: [GROUP], resources: [PLURAL], verbs: ["get", "list", "watch"] },
      { apiGroups: [""], resources: ["pods", "pods/log"], verbs: ["get", "list"] },
      ...(archive ? [{ apiGroups: [LOG_API_GROUP], resources: [LOG_API_RESOURCE], verbs: ["get"] }] : []),
    ];
    await api.call({
      method: "POST",
      path: `/apis/rbac.authorization.k8s.io/v1/namespaces/${namespace}/roles`,
      body: { apiVersion: "rbac.authorization.k8s.io/v1", kind: "Role", metadata: { name: user }, rules },
    });
    await api.call({
      method: "POST",
      path: `/apis/rbac.authorization.k8s.io/v1/namespaces/${namespace}/rolebindings`,
      body: {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "RoleBinding",
        metadata: { name: user },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: user },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: user }],
      },
    });
  }

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "log-api-"));
    namespace = await createTestNamespace(core, "pb-log-api");
    controllerNamespace = await createTestNamespace(core, "pb-log-api-ctl");
    objectStore = await startObjectStore({ binDir: inject("binDir"), stateDir: dir });
    archive = objectStore.client(PREFIX);
    // The controller's store reads its keys from the SDK's env, as in its pod.
    process.env.AWS_ACCESS_KEY_ID = objectStore.accessKeyId;
    process.env.AWS_SECRET_ACCESS_KEY = objectStore.secretAccessKey;

    // A run of two attempts that ended, whose pods are gone (ttlSecondsAfterFinished), its output archived.
    const playbook = await createPlaybook(namespace, NAME, {
      tasks: [
        { name: "build", run: "make" },
        { name: "test", run: "make test" },
      ],
    });
    await kubectl([
      "-n",
      namespace,
      "patch",
      "playbook",
      NAME,
      "--subresource=status",
      "--type=merge",
      "-p",
      JSON.stringify({
        status: {
          phase: "Failed",
          podName: `${NAME}-2`,
          podAttempts: 2,
          conditions: [
            {
              type: "Succeeded",
              status: "False",
              reason: "TaskFailed",
              message: "task test exited 1",
              lastTransitionTime: new Date().toISOString(),
            },
          ],
        },
      }),
    ]);
    const run = { namespace, name: NAME, uid: playbook.metadata.uid };
    archived[1] = attemptOutput(1, 1 << 20);
    archived[2] = attemptOutput(2, 6 << 20);
    for (const attempt of [1, 2])
      await archive.putObject(attemptLogKey(PREFIX, run, attempt), archived[attempt] as Buffer, "text/plain");

    const serving = await logApiServingCertificate(dir, controllerNamespace);
    port = await freePort();
    const endpoint = await logApiEndpoint(path.dirname(inject("kubeconfig")), port);
    address = endpoint.listen;
    stopRelays = endpoint.stop;
    // Watching another namespace: nothing reconciles the run above, which only the archive holds.
    controller = startController([controllerNamespace], {
      logArchiveBucket: objectStore.bucket,
      logArchiveEndpoint: objectStore.endpoint,
      logArchiveRegion: objectStore.region,
      logArchivePrefix: PREFIX,
      logArchiveForcePathStyle: true,
      logApiAddress: `${address}:${port}`,
      logApiCertFile: serving.certFile,
      logApiKeyFile: serving.keyFile,
    });
    unregister = await registerLogApi(api, {
      namespace: controllerNamespace,
      address: endpoint.endpoint,
      port,
      caBundle: readFileSync(serving.caFile),
    });
    await grant("reader", true);
    await grant("stranger", false);
    kubeconfigOf.reader = await kubeconfigFor("reader");
    kubeconfigOf.stranger = await kubeconfigFor("stranger");
  }, 300_000);

  afterAll(async () => {
    await unregister?.();
    await controller?.stop();
    await stopRelays?.();
    archive?.destroy();
    await objectStore?.stop();
    if (namespace) await deleteTestNamespace(core, namespace);
    if (controllerNamespace) await deleteTestNamespace(core, controllerNamespace);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const logs = (user: string, args: string[]) =>
    startCli(["logs", NAME, ...args], { env: { KUBECONFIG: kubeconfigOf[user] } });

  /** `kubectl get --raw` as `user` (impersonated), its stdout as bytes. */
  async function getRaw(user: string, rawPath: string): Promise<Buffer> {
    const { execFile } = await import("node:child_process");
    return new Promise((resolve, reject) =>
      execFile(
        path.join(inject("binDir"), "kubectl"),
        ["--as", user, "get", "--raw", rawPath],
        { env: { ...process.env, KUBECONFIG: inject("kubeconfig") }, encoding: "buffer", maxBuffer: 1 << 26 },
        (error, stdout, stderr) =>
          error ? reject(Object.assign(error, { stderr: stderr.toString() })) : resolve(stdout),
      ),
    );
  }

  describe("an archived log read back through the API server", () => {
    it("gives a user granted get playbooklogs every byte, with kubectl get --raw and playbook logs", async () => {
      const latest = await getRaw("reader", logPath(NAME));
      expect(sha256(latest)).toBe(sha256(archived[2] as Buffer));
      const first = await getRaw("reader", logPath(NAME, 1));
      expect(sha256(first)).toBe(sha256(archived[1] as Buffer));

      const second = await logs("reader", ["--attempt", "2"]);
      expect(second.code, second.stderr).toBe(0);
      expect(sha256(second.stdout)).toBe(sha256(archived[2] as Buffer));
      expect(second.stderr).toContain(
        `playbook: from the log archive: attempt 2, ${archived[2]?.length} bytes`,
      );

      // Every attempt, in order, as the pods' logs are shown.
      const all = await logs("reader", []);
      expect(all.code, all.stderr).toBe(0);
      expect(all.stdout).toBe(
        `--- pod ${NAME}-1 (attempt 1) ---\n${archived[1]}--- pod ${NAME}-2 (attempt 2) ---\n${archived[2]}`,
      );
    });

    it("keeps one task's lines of the archive with --task, as of a pod's log", async () => {
      const result = await logs("reader", ["--task", "test", "--attempt", "1"]);
      expect(result.code, result.stderr).toBe(0);
      const expected = (archived[1] as Buffer)
        .toString()
        .split("\n")
        .filter((line) => line.startsWith("[test] "))
        .map((line) => `${line.slice("[test] ".length)}\n`)
        .join("");
      expect(result.stdout).toBe(expected);
    });

    it("prints a finished run's archive with -f and ends", async () => {
      const result = await logs("reader", ["-f", "--attempt", "1"]);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toBe((archived[1] as Buffer).toString());
    });

    it("refuses a user without get playbooklogs, and says which permission it takes", async () => {
      const refused = await getRaw("stranger", logPath(NAME)).catch((error: { stderr: string }) => error);
      expect(refused).not.toBeInstanceOf(Buffer);
      expect((refused as { stderr: string }).stderr).toMatch(/Forbidden|forbidden/);
      // The API server refused it before proxying: the controller never saw it.
      expect((refused as { stderr: string }).stderr).not.toContain(REFUSED_BY_LOG_API);

      const result = await logs("stranger", []);
      expect(result.code).toBe(2);
      expect(result.stdout).toBe("");
      expect(result.stderr).toContain(`get playbooklogs.logs.playbook.dev in namespace ${namespace}`);
    });

    it("refuses, in the controller too, a front-proxy request for a user RBAC does not allow", async () => {
      const proxy = frontProxyClientOf(inject("kubeconfig"));
      const direct = (user: string | undefined, withCert = true) =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          const request = https.get(
            {
              host: address,
              port,
              path: logPath(NAME, 2),
              rejectUnauthorized: false,
              ...(withCert ? { cert: readFileSync(proxy.certFile), key: readFileSync(proxy.keyFile) } : {}),
              headers:
                user === undefined ? {} : { "X-Remote-User": user, "X-Remote-Group": "system:authenticated" },
            },
            (response) => {
              const chunks: Buffer[] = [];
              response.on("data", (c: Buffer) => chunks.push(c));
              response.on("end", () =>
                resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString() }),
              );
            },
          );
          request.on("error", reject);
        });
      const stranger = await direct("stranger");
      expect(stranger.status).toBe(403);
      expect(JSON.parse(stranger.body).message).toContain(REFUSED_BY_LOG_API);
      expect(JSON.parse(stranger.body)).toMatchObject({
        reason: "Forbidden",
        message: expect.stringContaining(`User "stranger" cannot get resource "playbooklogs"`),
      });
      expect(stranger.body).not.toContain("attempt 2 line");
      // Without the API server's front-proxy certificate, no header is believed.
      expect((await direct("reader", false)).status).toBe(401);
      // The same request for a user RBAC allows is answered: the refusal above is the check's.
      const reader = await direct("reader");
      expect(reader.status).toBe(200);
      expect(sha256(reader.body)).toBe(sha256(archived[2] as Buffer));
    });

    it("answers a run with no such attempt, and a Playbook that does not exist, as not found", async () => {
      const missing = await logs("reader", ["--attempt", "3"]);
      expect(missing.code).toBe(2);
      expect(missing.stderr).toContain("--attempt 3:");
      const gone = await getRaw("reader", logPath("never-was")).catch((error: { stderr: string }) => error);
      expect((gone as { stderr: string }).stderr).toMatch(/NotFound|not found/);
    });
  });
}
