// The leader Lease on the real API server, where a call can hang and a shutdown can take long:
// - a renew stuck in an exec credential plugin that never answers (client-node awaits the
//   credential before it sends the request, so no signal reaches it) ends leading at the last
//   renew + renewDeadline, from a timer; a standby then takes over;
// - on stop, the leader keeps renewing while a reconcile in flight finishes (a pod create held by
//   a validating webhook served here on loopback), then releases the Lease with its
//   leaseTransitions kept.
// The controllers run in this process (test/controller/support.ts: lease 4s, renew deadline 3s,
// retry 500ms); their pods are on the scripted node, where the test writes each run's success.
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import path from "node:path";
import { AdmissionregistrationV1Api, KubeConfig, type V1Lease } from "@kubernetes/client-node";
import { afterAll, describe, expect, it } from "vitest";
import { makeClients } from "../../src/runtime/kube-config.js";
import { microTime } from "../../src/runtime/leader-election.js";
import { openssl } from "../harness/certificates.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { freePort } from "../harness/processes.js";
import { succeedRun } from "./scripted-runs.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  type RunningController,
  spawnControllerProcess,
  startController,
  waitForFinished,
} from "./support.js";

const RENEW_DEADLINE_MS = 3_000;
const LEASE_DURATION_MS = 4_000;

const { core, kubeConfig } = clients();
const api = makeClients(kubeConfig).api;
const admission = kubeConfig.makeApiClient(AdmissionregistrationV1Api);
const namespaces: string[] = [];
const controllers: RunningController[] = [];
const cleanups: (() => Promise<void> | void)[] = [];
const scratch = mkdtempSync(path.join(tmpdir(), "pb-leader-lease-"));

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  await Promise.all(controllers.map((c) => c.stop()));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
  rmSync(scratch, { recursive: true, force: true });
});

async function namespace(prefix: string): Promise<string> {
  const name = await createTestNamespace(core, prefix);
  namespaces.push(name);
  return name;
}

function controllerFor(ns: string, through?: KubeConfig): RunningController {
  const running = startController([ns], {}, through);
  controllers.push(running);
  return running;
}

const leaseName = (ns: string) => `playbook-controller-${ns}`;
const readLease = (ns: string) => api.readNamespacedLease({ namespace: ns, name: leaseName(ns) });
const leading = async (running: RunningController) =>
  (await running.controller.metrics.isLeader.get()).values[0]?.value;

/**
 * A kubeconfig for the test cluster whose user is an exec credential plugin: a shell script that
 * hands out the admin's client certificate with a 2s expiry (so it is asked again every few
 * seconds), and, while the file `hang` exists beside it, does not answer.
 */
function execPluginKubeConfig(dir: string): { kubeConfig: KubeConfig; hang(): void; answer(): void } {
  const user = kubeConfig.getCurrentUser();
  const pem = (data: string | undefined, file: string | undefined) =>
    data ? Buffer.from(data, "base64").toString("utf8") : readFileSync(file ?? "", "utf8");
  writeFileSync(path.join(dir, "cert.json"), JSON.stringify(pem(user?.certData, user?.certFile)));
  writeFileSync(path.join(dir, "key.json"), JSON.stringify(pem(user?.keyData, user?.keyFile)));
  const plugin = path.join(dir, "credential.sh");
  writeFileSync(
    plugin,
    `#!/bin/sh
dir=$(dirname "$0")
while [ -e "$dir/hang" ]; do sleep 0.2; done
expires=$(date -u -d "+2 seconds" +%Y-%m-%dT%H:%M:%SZ)
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"expirationTimestamp":"%s","clientCertificateData":%s,"clientKeyData":%s}}\\n' \\
  "$expires" "$(cat "$dir/cert.json")" "$(cat "$dir/key.json")"
`,
  );
  chmodSync(plugin, 0o755);
  const cluster = kubeConfig.getCurrentCluster();
  if (!cluster) throw new Error("the test kubeconfig names no cluster");
  const viaPlugin = new KubeConfig();
  viaPlugin.loadFromOptions({
    clusters: [cluster],
    users: [
      {
        name: "exec-plugin",
        exec: { apiVersion: "client.authentication.k8s.io/v1", command: plugin, args: [], env: [] },
      },
    ],
    contexts: [{ name: "exec-plugin", cluster: cluster.name, user: "exec-plugin" }],
    currentContext: "exec-plugin",
  });
  const flag = path.join(dir, "hang");
  return {
    kubeConfig: viaPlugin,
    hang: () => writeFileSync(flag, ""),
    answer: () => {
      if (existsSync(flag)) rmSync(flag);
    },
  };
}

describe("a leader whose renew hangs in an exec credential plugin that never answers", () => {
  it("stops leading at its last renew + renewDeadline, and the standby takes over", async () => {
    const ns = await namespace("pb-lease-exec");
    const dir = mkdtempSync(path.join(scratch, "exec-"));
    const plugin = execPluginKubeConfig(dir);
    cleanups.push(plugin.answer);
    const leader = controllerFor(ns, plugin.kubeConfig);
    await eventually("the replica on the exec plugin to lead", async () =>
      (await readLease(ns).catch(() => undefined))?.spec?.holderIdentity === leader.identity
        ? true
        : undefined,
    );
    const standby = controllerFor(ns);
    await createPlaybook(ns, "before", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    await succeedRun(core, ns, "before");
    expect(condition(await waitForFinished(ns, "before", 60_000), "Succeeded")?.reason).toBe("Succeeded");

    // The leader's last renewTime, as polled while waiting (same machine, same wall clock).
    let lastRenew = 0;
    const beforeHang = await readLease(ns);
    expect(
      { holder: beforeHang.spec?.holderIdentity, leading: await leading(leader) },
      `the leader still leads when its plugin hangs (Lease ${JSON.stringify(beforeHang.spec)})`,
    ).toEqual({ holder: leader.identity, leading: 1 });
    lastRenew = Date.parse(String(beforeHang.spec?.renewTime));
    plugin.hang();
    const stoppedAt = await eventually(
      "the leader to stop leading",
      async () => {
        const lease = await readLease(ns);
        if (lease.spec?.holderIdentity === leader.identity)
          lastRenew = Math.max(lastRenew, Date.parse(String(lease.spec?.renewTime)));
        return (await leading(leader)) === 0 ? Date.now() : undefined;
      },
      20_000,
    );
    const afterRenew = stoppedAt - lastRenew;
    process.stderr.write(
      `[leader-lease] exec plugin hung: the leader stopped ${afterRenew}ms after its last renew (renewDeadline ${RENEW_DEADLINE_MS}ms)\n`,
    );
    // Polled every 200ms: the stop is seen up to a poll late.
    expect(afterRenew).toBeGreaterThanOrEqual(RENEW_DEADLINE_MS - 100);
    expect(afterRenew).toBeLessThan(RENEW_DEADLINE_MS + 1_500);
    // The controller ends with the loss, though its workers may be stuck behind the plugin too.
    expect(
      await leader.done.then(
        () => "resolved",
        (error: Error) => error.message,
      ),
    ).toBe("lost the leader Lease");

    await eventually("the standby to hold the Lease", async () =>
      (await readLease(ns)).spec?.holderIdentity === standby.identity ? true : undefined,
    );
    await createPlaybook(ns, "after", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    await succeedRun(core, ns, "after");
    expect(condition(await waitForFinished(ns, "after", 60_000), "Succeeded")?.reason).toBe("Succeeded");
    plugin.answer();
  });
});

describe("`playbook controller` whose exec credential plugin stops answering", () => {
  it("exits 1 once the renew deadline passed, though the plugin still hangs", async () => {
    const ns = await namespace("pb-lease-exit");
    const dir = mkdtempSync(path.join(scratch, "exit-"));
    const plugin = execPluginKubeConfig(dir);
    cleanups.push(plugin.answer);
    const kubeconfig = path.join(dir, "kubeconfig");
    writeFileSync(kubeconfig, plugin.kubeConfig.exportConfig());
    const identity = `exit-${path.basename(dir)}`;
    const replica = spawnControllerProcess(
      [
        "--namespaces",
        ns,
        "--leader-election-namespace",
        ns,
        "--leader-election-id",
        leaseName(ns),
        "--identity",
        identity,
        "--lease-duration",
        `${LEASE_DURATION_MS / 1000}s`,
        "--renew-deadline",
        `${RENEW_DEADLINE_MS / 1000}s`,
        "--retry-period",
        "500ms",
        "--metrics-address",
        `127.0.0.1:${await freePort()}`,
      ],
      { KUBECONFIG: kubeconfig, PLAYBOOK_LOG_FORMAT: "json", PLAYBOOK_LOG_LEVEL: "info" },
    );
    cleanups.push(() => {
      replica.child.kill("SIGKILL");
    });
    await eventually("the process to lead", async () =>
      (await readLease(ns).catch(() => undefined))?.spec?.holderIdentity === identity ? true : undefined,
    );
    plugin.hang();
    const hungAt = Date.now();
    const code = await Promise.race([
      replica.exited,
      new Promise<string>((resolve) => setTimeout(() => resolve("still running after 20s"), 20_000)),
    ]);
    // The plugin's credential lives 2s, the renew deadline is 3s, the shutdown after it at most 3s more.
    const exitedAfter = Date.now() - hungAt;
    expect(code, replica.output()).toBe(1);
    expect(exitedAfter).toBeLessThan(2_000 + RENEW_DEADLINE_MS * 2 + 2_000);
    expect(replica.output()).toContain('"msg":"Lost the leader Lease"');
    expect(replica.stderr()).toContain(
      `playbook controller: lost the leader Lease (not renewed within --renew-deadline ${RENEW_DEADLINE_MS}ms); exiting`,
    );
    plugin.answer();
  });
});

/**
 * A validating webhook for pod creates in `ns`, served here: dry-run creates (the probe) are
 * allowed at once, real ones are held until `open()`.
 */
async function holdingWebhook(ns: string, dir: string) {
  const keyFile = path.join(dir, "webhook.key");
  const certFile = path.join(dir, "webhook.crt");
  await openssl([
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-keyout",
    keyFile,
    "-out",
    certFile,
    "-subj",
    "/CN=pb-hold-webhook",
    "-addext",
    "subjectAltName=IP:127.0.0.1",
    "-days",
    "1",
  ]);
  const held: string[] = [];
  let probed = 0;
  let open: () => void = () => {};
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  const server = https.createServer(
    { key: readFileSync(keyFile), cert: readFileSync(certFile) },
    (request, response) => {
      let body = "";
      request.setEncoding("utf8");
      request.on("data", (chunk: string) => {
        body += chunk;
      });
      request.on("end", async () => {
        const review = JSON.parse(body) as {
          request: { uid: string; dryRun?: boolean; object?: { metadata?: { name?: string } } };
        };
        if (review.request.dryRun) probed++;
        else {
          held.push(review.request.object?.metadata?.name ?? "");
          await opened;
        }
        response.setHeader("Content-Type", "application/json");
        response.end(
          JSON.stringify({
            apiVersion: "admission.k8s.io/v1",
            kind: "AdmissionReview",
            response: { uid: review.request.uid, allowed: true },
          }),
        );
      });
    },
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  const name = `pb-hold-${ns}`;
  await admission.createValidatingWebhookConfiguration({
    body: {
      metadata: { name },
      webhooks: [
        {
          name: "hold.pb-test.playbook.dev",
          clientConfig: {
            url: `https://127.0.0.1:${port}/`,
            caBundle: readFileSync(certFile).toString("base64"),
          },
          rules: [{ operations: ["CREATE"], apiGroups: [""], apiVersions: ["v1"], resources: ["pods"] }],
          namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": ns } },
          sideEffects: "None",
          admissionReviewVersions: ["v1"],
          failurePolicy: "Fail",
          timeoutSeconds: 25,
        },
      ],
    },
  });
  cleanups.push(async () => {
    open();
    await admission.deleteValidatingWebhookConfiguration({ name }).catch(() => {});
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  // The API server picks the configuration up from its own watch: probe until it calls us.
  await eventually("the API server to call the webhook", async () => {
    await core.createNamespacedPod({
      namespace: ns,
      dryRun: "All",
      body: {
        metadata: { name: "probe" },
        spec: { containers: [{ name: "probe", image: "probe" }] },
      },
    });
    return probed > 0 ? true : undefined;
  });
  return { held, open };
}

describe("a leader stopped while a reconcile is in flight", () => {
  it("keeps renewing the Lease until the reconcile ends, then releases it with leaseTransitions kept", async () => {
    const ns = await namespace("pb-lease-drain");
    const dir = mkdtempSync(path.join(scratch, "drain-"));
    const webhook = await holdingWebhook(ns, dir);
    // A Lease five changes of leader old, last held by a replica long gone.
    const longAgo = microTime(Date.now() - 3_600_000);
    await api.createNamespacedLease({
      namespace: ns,
      body: {
        apiVersion: "coordination.k8s.io/v1",
        kind: "Lease",
        metadata: { name: leaseName(ns), namespace: ns },
        spec: {
          holderIdentity: "replica-gone",
          leaseDurationSeconds: 1,
          acquireTime: longAgo,
          renewTime: longAgo,
          leaseTransitions: 5,
        } as unknown as V1Lease["spec"], // MicroTime strings, as the controller writes them
      },
    });
    const leader = controllerFor(ns);
    const taken = await eventually("the controller to take the Lease", async () => {
      const lease = await readLease(ns);
      return lease.spec?.holderIdentity === leader.identity ? lease : undefined;
    });
    expect(taken.spec?.leaseTransitions).toBe(6);

    await createPlaybook(ns, "held", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    await eventually("the pod create to reach the webhook", async () =>
      webhook.held.length > 0 ? true : undefined,
    );
    const stopping = leader.stop();
    const stoppedAt = Date.now();
    // Renewed past a whole lease duration after the stop: no standby could have taken it over
    // while the pod create was in flight.
    const renewed = await eventually(
      "the Lease to be renewed for a lease duration after the stop",
      async () => {
        const lease = await readLease(ns);
        expect(lease.spec?.holderIdentity).toBe(leader.identity);
        return Date.parse(String(lease.spec?.renewTime)) > stoppedAt + LEASE_DURATION_MS + 500
          ? lease
          : undefined;
      },
      15_000,
    );
    expect(renewed.spec?.leaseTransitions).toBe(6);
    expect(await leading(leader)).toBe(1);

    webhook.open();
    await stopping;
    const released = await readLease(ns);
    expect(released.spec?.holderIdentity ?? "").toBe("");
    expect(released.spec?.leaseTransitions).toBe(6);
    expect(await leading(leader)).toBe(0);
    const pods = await core.listNamespacedPod({ namespace: ns });
    expect(pods.items.map((pod) => pod.metadata?.name)).toEqual(webhook.held);
  });
});
