// Reading an archived log back (docs/log-archive.md#reading-an-archived-log), the suite that
// test/controller/log-api.test.ts runs beside the scripted node and test/real-node/log-api.test.ts
// beside the real one (whose API server dials the log API out of the node's network namespace).
// The controller serves the aggregated API logs.playbook.dev through the real kube-apiserver's
// aggregation layer, from objects in SeaweedFS at the keys of a real Playbook whose pods are gone.
// A user granted `get playbooklogs/log` reads every byte, through `playbook logs` and `kubectl get
// --raw`, and `get playbooklogs` lists the attempts archived; a user without the subresource is
// refused the bytes by the API server, and by the controller itself when a request reaches it with
// the API server's front-proxy certificate but for a user RBAC does not allow. The `log`
// subresource is long-running to the API server: its request timeout does not cut a slow read.
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { stringify } from "yaml";
import {
  LOG_API_GROUP,
  LOG_API_RESOURCE,
  LOG_API_SUBRESOURCE,
  LOG_API_VERSION,
} from "../../src/api/log-archive.js";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import { attemptLogKey, recordKey } from "../../src/controller/log-archive/archive-keys.js";
import type { ArchiveStore } from "../../src/controller/log-archive/archive-store.js";
import { LOG_API_KIND, REFUSED_BY_LOG_API } from "../../src/controller/log-archive/log-api.js";
import { ApiError } from "../../src/runtime/api-client.js";
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
  /** A run of one attempt, big enough that the API server is still sending when a timeout passes. */
  const BIG = "weekly";
  const BIG_BYTES = 64 << 20;

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
  const objectPath = (name: string) =>
    `/apis/${LOG_API_GROUP}/${LOG_API_VERSION}/namespaces/${namespace}/${LOG_API_RESOURCE}/${name}`;
  const logPath = (name: string, attempt?: number) =>
    `${objectPath(name)}/${LOG_API_SUBRESOURCE}${attempt === undefined ? "" : `?attempt=${attempt}`}`;
  /** What the controller recorded beside each attempt's object. */
  const records: Record<number, { bytes: number; sha256: string; reason: string; message: string }> = {};

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

  /**
   * A Role with the rules a user reading runs has, bound to `user`, and of the archive: nothing,
   * `get playbooklogs` alone (the attempts listed), or with `get playbooklogs/log` (the bytes).
   */
  async function grant(user: string, archive: "none" | "object" | "log"): Promise<void> {
    const resources = {
      none: [],
      object: [LOG_API_RESOURCE],
      log: [LOG_API_RESOURCE, `${LOG_API_RESOURCE}/${LOG_API_SUBRESOURCE}`],
    }[archive];
    const rules = [
      { apiGroups: [GROUP], resources: [PLURAL], verbs: ["get", "list", "watch"] },
      { apiGroups: [""], resources: ["pods", "pods/log"], verbs: ["get", "list"] },
      ...(resources.length > 0 ? [{ apiGroups: [LOG_API_GROUP], resources, verbs: ["get"] }] : []),
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
    for (const attempt of [1, 2]) {
      const bytes = archived[attempt] as Buffer;
      const key = attemptLogKey(PREFIX, run, attempt);
      await archive.putObject(key, bytes, "text/plain");
      // The record the controller puts beside a completed object (log-archiver.ts).
      records[attempt] = {
        bytes: bytes.length,
        sha256: sha256(bytes),
        reason: attempt === 1 ? "NodeLost" : "Archived",
        message: attempt === 1 ? "the node went away while the run ran" : "",
      };
      await archive.putObject(
        recordKey(key),
        JSON.stringify({ v: 1, ...records[attempt] }),
        "application/json",
      );
    }
    const big = await createPlaybook(namespace, BIG, { tasks: [{ name: "build", run: "make" }] });
    archived[0] = attemptOutput(1, BIG_BYTES);
    await archive.putObject(
      attemptLogKey(PREFIX, { namespace, name: BIG, uid: big.metadata.uid }, 1),
      archived[0],
      "text/plain",
    );

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
      logArchiveUpload: "follow",
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
    await grant("reader", "log");
    await grant("lister", "object");
    await grant("stranger", "none");
    for (const user of ["reader", "lister", "stranger"]) kubeconfigOf[user] = await kubeconfigFor(user);
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

  /** kubectl as `user` (impersonated), its stdout as bytes; rejects with its stderr. */
  async function kubectlAs(user: string, args: string[]): Promise<Buffer> {
    const { execFile } = await import("node:child_process");
    return new Promise((resolve, reject) =>
      execFile(
        path.join(inject("binDir"), "kubectl"),
        ["--as", user, ...args],
        { env: { ...process.env, KUBECONFIG: inject("kubeconfig") }, encoding: "buffer", maxBuffer: 1 << 27 },
        (error, stdout, stderr) =>
          error ? reject(Object.assign(error, { stderr: stderr.toString() })) : resolve(stdout),
      ),
    );
  }
  const getRaw = (user: string, rawPath: string) => kubectlAs(user, ["get", "--raw", rawPath]);
  const refusal = (promise: Promise<Buffer>) =>
    promise.then(
      () => "",
      (error: { stderr: string }) => error.stderr,
    );

  /** A GET straight to the controller's log API with the API server's front-proxy certificate (or none). */
  function direct(
    target: string,
    user: string | undefined,
    withCert = true,
  ): Promise<{ status: number; body: string }> {
    const proxy = frontProxyClientOf(inject("kubeconfig"));
    return new Promise((resolve, reject) => {
      const request = https.get(
        {
          host: address,
          port,
          path: target,
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
  }

  /**
   * Reads `target` through the API server as the test's admin, pausing `pauseMs` once the first
   * bytes came (the socket not read meanwhile, so the API server cannot send more); resolves with
   * the bytes, or rejects when the answer is cut.
   */
  async function slowRead(target: string, pauseMs: number): Promise<Buffer> {
    const server = new URL(kubeConfig.getCurrentCluster()?.server ?? "");
    const options: https.RequestOptions = {
      host: server.hostname,
      port: server.port,
      path: target,
      headers: { accept: "text/plain" },
    };
    await kubeConfig.applyToHTTPSOptions(options);
    return new Promise((resolve, reject) => {
      const request = https.get(options, (response) => {
        if (response.statusCode !== 200) {
          reject(new Error(`answered ${response.statusCode}`));
          response.resume();
          return;
        }
        const chunks: Buffer[] = [];
        let paused = false;
        response.on("data", (chunk: Buffer) => {
          chunks.push(chunk);
          if (paused) return;
          paused = true;
          response.pause();
          setTimeout(() => response.resume(), pauseMs);
        });
        response.on("end", () => resolve(Buffer.concat(chunks)));
        response.on("aborted", () => reject(new Error(`cut after ${Buffer.concat(chunks).length} bytes`)));
        response.on("error", (error) =>
          reject(new Error(`cut after ${Buffer.concat(chunks).length} bytes: ${error.message}`)),
        );
      });
      request.on("error", reject);
    });
  }

  describe("an archived log read back through the API server", () => {
    it("gives a user granted get playbooklogs/log every byte, with kubectl get --raw and playbook logs", async () => {
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

    it("lists the attempts archived with kubectl get playbooklogs, to a user granted get playbooklogs alone", async () => {
      const playbook = (await api.call({
        method: "GET",
        path: `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PLURAL}/${NAME}`,
      })) as { metadata: { creationTimestamp: string } };
      for (const user of ["reader", "lister"]) {
        const listed = JSON.parse(
          (await kubectlAs(user, ["-n", namespace, "get", LOG_API_RESOURCE, NAME, "-o", "json"])).toString(),
        );
        // Made when the run was: kubectl's AGE is the Playbook's.
        expect(listed).toMatchObject({
          kind: LOG_API_KIND,
          apiVersion: `${LOG_API_GROUP}/${LOG_API_VERSION}`,
          metadata: { name: NAME, namespace, creationTimestamp: playbook.metadata.creationTimestamp },
        });
        expect(listed.attempts).toEqual([
          { attempt: 1, ...records[1] },
          { attempt: 2, ...records[2] },
        ]);
      }
      // Without -o, kubectl's own columns.
      const table = (await kubectlAs("lister", ["-n", namespace, "get", LOG_API_RESOURCE, NAME])).toString();
      expect(table).toMatch(new RegExp(`^NAME\\s+AGE\\n${NAME}\\s+\\d+[smhd]`));
      // Discovery names the subresource, as the API server's names pods/log.
      const resources = JSON.parse(
        (await getRaw("reader", `/apis/${LOG_API_GROUP}/${LOG_API_VERSION}`)).toString(),
      ).resources as { name: string; verbs: string[] }[];
      expect(resources.map((r) => [r.name, r.verbs])).toEqual([
        [LOG_API_RESOURCE, ["get"]],
        [`${LOG_API_RESOURCE}/${LOG_API_SUBRESOURCE}`, ["get"]],
      ]);
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

    it("refuses the bytes to a user without get playbooklogs/log, and says which permission it takes", async () => {
      for (const user of ["stranger", "lister"]) {
        const said = await refusal(getRaw(user, logPath(NAME)));
        expect(said).toMatch(/Forbidden|forbidden/);
        // The API server refused it before proxying: the controller never saw it.
        expect(said).not.toContain(REFUSED_BY_LOG_API);

        const result = await logs(user, []);
        expect(result.code).toBe(2);
        expect(result.stdout).toBe("");
        expect(result.stderr).toContain(
          `it takes get playbooklogs/log (API group logs.playbook.dev) in namespace ${namespace}`,
        );
      }
      expect(await refusal(kubectlAs("stranger", ["-n", namespace, "get", LOG_API_RESOURCE, NAME]))).toMatch(
        /forbidden/,
      );
    });

    it("refuses, in the controller too, a front-proxy request for a user RBAC does not allow", async () => {
      const stranger = await direct(logPath(NAME, 2), "stranger");
      expect(stranger.status).toBe(403);
      expect(JSON.parse(stranger.body).message).toContain(REFUSED_BY_LOG_API);
      expect(JSON.parse(stranger.body)).toMatchObject({
        reason: "Forbidden",
        message: expect.stringContaining(`User "stranger" cannot get resource "playbooklogs/log"`),
        details: { name: NAME, group: LOG_API_GROUP, kind: LOG_API_KIND },
      });
      expect(stranger.body).not.toContain("attempt 2 line");
      // Without the API server's front-proxy certificate, no header is believed.
      expect((await direct(logPath(NAME, 2), "reader", false)).status).toBe(401);
      // The same request for a user RBAC allows is answered: the refusal above is the check's.
      const reader = await direct(logPath(NAME, 2), "reader");
      expect(reader.status).toBe(200);
      expect(sha256(reader.body)).toBe(sha256(archived[2] as Buffer));
    });

    it("refuses the subresource, in the controller too, to a user granted get playbooklogs alone", async () => {
      // The controller checks the subresource asked for, not the resource: the lister may list.
      const listed = await direct(objectPath(NAME), "lister");
      expect(listed.status).toBe(200);
      expect(JSON.parse(listed.body).attempts).toHaveLength(2);
      const bytes = await direct(logPath(NAME, 2), "lister");
      expect(bytes.status).toBe(403);
      expect(JSON.parse(bytes.body)).toMatchObject({
        reason: "Forbidden",
        message: expect.stringContaining(`User "lister" cannot get resource "playbooklogs/log"`),
      });
      expect(bytes.body).not.toContain("attempt 2 line");
    });

    it("answers a run with no such attempt, and a Playbook that does not exist, as not found", async () => {
      const missing = await logs("reader", ["--attempt", "3"]);
      expect(missing.code).toBe(2);
      expect(missing.stderr).toContain("--attempt 3:");
      const gone = await refusal(getRaw("reader", logPath("never-was")));
      expect(gone).toMatch(/NotFound|not found/);
      const bad = await refusal(getRaw("reader", `${logPath(NAME)}?attempt=first`));
      expect(bad).toContain("attempt=first: must be a whole number from 1 to 10000");
    });

    it("names the run in a refusal's Status details, and nothing in the API server's own 404", async () => {
      const answerOf = (target: string) =>
        api.call({ method: "GET", path: target }).then(
          () => ({ code: 200, body: undefined as unknown }),
          (error: unknown) =>
            error instanceof ApiError ? { code: error.code, body: error.body } : { code: 0, body: error },
        );
      expect(await answerOf(logPath(NAME, 9))).toMatchObject({
        code: 404,
        body: { reason: "NotFound", details: { name: NAME, group: LOG_API_GROUP, kind: LOG_API_KIND } },
      });
      expect(await answerOf(logPath("never-was"))).toMatchObject({
        code: 404,
        body: { details: { name: "never-was", group: LOG_API_GROUP, kind: LOG_API_KIND } },
      });
      // A refusal of no object (an unknown subresource) names none.
      const unknown = await answerOf(`${objectPath(NAME)}/exec`);
      expect(unknown.code).toBe(404);
      expect(unknown.body).not.toHaveProperty("details");
      // A group no APIService serves: the API server's 404 names nothing; the CLI takes it as no archive.
      const unserved = await answerOf(
        `/apis/unserved.${LOG_API_GROUP}/${LOG_API_VERSION}/namespaces/${namespace}/${LOG_API_RESOURCE}/${NAME}/log`,
      );
      expect(unserved.code).toBe(404);
      expect((unserved.body as { details?: { name?: unknown } } | undefined)?.details?.name).toBeUndefined();
    });

    it("sends a log whole to a slow reader past the API server's request timeout (a long-running subresource)", async () => {
      // ?timeout=2s bounds a short request to 2 s; the reader pauses 4 s mid-stream, and the
      // 64 MiB cannot all wait in the sockets' buffers, so the API server is still sending then.
      const read = await slowRead(`${logPath(BIG)}?timeout=2s`, 4_000);
      expect(read.length).toBe((archived[0] as Buffer).length);
      expect(sha256(read)).toBe(sha256(archived[0] as Buffer));
    }, 120_000);
  });
}
