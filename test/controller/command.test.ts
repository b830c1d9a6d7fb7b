import { CoordinationV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { freePort } from "../harness/processes.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  spawnControllerProcess,
  succeedFirstPod,
  waitForFinished,
} from "./support.js";

const { core, kubeConfig } = clients();
const coordination = kubeConfig.makeApiClient(CoordinationV1Api);
let namespace: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-command");
});
afterAll(() => deleteTestNamespace(core, namespace));

function spawnController(identity: string, port: number, extra: string[] = []) {
  return spawnControllerProcess(
    [
      "--namespaces",
      namespace,
      "--metrics-address",
      `127.0.0.1:${port}`,
      "--leader-election-namespace",
      namespace,
      "--identity",
      identity,
      ...extra,
    ],
    { PLAYBOOK_LOG_LEVEL: "warn" },
  );
}

async function leaseHolder(name: string): Promise<string> {
  try {
    return (await coordination.readNamespacedLease({ namespace, name })).spec?.holderIdentity ?? "";
  } catch {
    return "";
  }
}

describe("two controller processes", () => {
  it("a standby takes over when the leader dies without releasing the Lease", async () => {
    const lease = [
      "--leader-election-id",
      "takeover",
      "--lease-duration",
      "3s",
      "--renew-deadline",
      "2s",
      "--retry-period",
      "500ms",
    ];
    const replicas = [
      spawnController("replica-a", await freePort(), lease),
      spawnController("replica-b", await freePort(), lease),
    ];
    try {
      const holder = await eventually("a leader", async () => (await leaseHolder("takeover")) || undefined);
      const leader = holder === "replica-a" ? replicas[0] : replicas[1];
      const standby = holder === "replica-a" ? "replica-b" : "replica-a";
      leader?.child.kill("SIGKILL");
      await eventually(
        "the standby to lead",
        async () => ((await leaseHolder("takeover")) === standby ? true : undefined),
        30_000,
      );
      await createPlaybook(namespace, "after-takeover", {
        ceiling: "1m",
        tasks: [{ name: "a", run: "true" }],
      });
      // Only the new leader makes the pod.
      await succeedFirstPod(namespace, "after-takeover");
      const playbook = await waitForFinished(namespace, "after-takeover", 60_000);
      expect(condition(playbook, "Succeeded")?.reason).toBe("Succeeded");
    } finally {
      for (const replica of replicas) replica.child.kill("SIGKILL");
    }
  });
});

describe("a few runs through `playbook controller`", () => {
  it("end with no failed reconcile: no status write conflicts with the controller's own last one", async () => {
    const port = await freePort();
    const {
      child,
      exited,
      output: outputOf,
    } = spawnController("conflict-test", port, ["--leader-election-id", "playbook-controller-conflicts"]);
    try {
      const url = `http://127.0.0.1:${port}`;
      await eventually("/readyz to answer 200", async () =>
        (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200 ? true : undefined,
      );
      const names = ["w1", "w2", "w3", "w4", "w5", "w6"];
      // Six runs at once, each written Running and then finished by the controller.
      await Promise.all(
        names.map(async (n) => {
          await createPlaybook(namespace, n, { ceiling: "1m", tasks: [{ name: "a", run: "sleep 1" }] });
          await succeedFirstPod(namespace, n, { afterRunning: true });
        }),
      );
      for (const n of names) await waitForFinished(namespace, n, 60_000);
      const counted = `playbook_runs_total{namespace="${namespace}",reason="Succeeded"} ${names.length}`;
      const metrics = await eventually("the runs to be counted", async () => {
        const text = await (await fetch(`${url}/metrics`)).text();
        return text.includes(counted) ? text : undefined;
      });
      const writes = Number(/^playbook_status_writes_total (\d+)/m.exec(metrics)?.[1]);
      expect(writes).toBeGreaterThanOrEqual(2 * names.length);
      // A 409 on a status write is counted here and retried.
      expect(Number(/^playbook_reconcile_errors_total (\d+)/m.exec(metrics)?.[1])).toBe(0);
      child.kill("SIGTERM");
      expect(await exited, outputOf()).toBe(0);
    } finally {
      child.kill("SIGKILL");
    }
  });
});

describe("playbook controller", () => {
  it("serves health and metrics, counts each run once, and releases its Lease on SIGTERM", async () => {
    const port = await freePort();
    const { child, exited, output: outputOf } = spawnController("command-test", port);
    try {
      const url = `http://127.0.0.1:${port}`;
      await eventually("/readyz to answer 200", async () =>
        (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200 ? true : undefined,
      );
      expect((await fetch(`${url}/healthz`)).status).toBe(200);

      await createPlaybook(namespace, "metered", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
      await succeedFirstPod(namespace, "metered");
      const playbook = await waitForFinished(namespace, "metered", 60_000);
      expect(condition(playbook, "Succeeded")?.reason).toBe("Succeeded");

      // The status can be read back a moment before the controller has counted its write, and
      // the active-runs gauge follows the controller's cache, which sees the write a moment later.
      const counted = `playbook_runs_total{namespace="${namespace}",reason="Succeeded"} 1`;
      const idle = `playbook_active_runs{namespace="${namespace}"} 0`;
      const metrics = await eventually("the run to be counted and no longer active", async () => {
        const text = await (await fetch(`${url}/metrics`)).text();
        return text.includes(counted) && text.includes(idle) ? text : undefined;
      });
      for (const name of [
        "playbook_runs_total",
        "playbook_run_duration_seconds_bucket",
        "playbook_task_duration_seconds_bucket",
        "playbook_active_runs",
        "playbook_reconcile_duration_seconds_bucket",
        "playbook_reconcile_errors_total",
        "playbook_workqueue_depth",
        "process_cpu_seconds_total",
      ]) {
        expect(metrics, name).toContain(name);
      }
      expect(metrics).toContain(counted);
      expect(metrics).toContain(`playbook_active_runs{namespace="${namespace}"} 0`);

      const lease = await coordination.readNamespacedLease({ namespace, name: "playbook-controller" });
      expect(lease.spec?.holderIdentity).toBe("command-test");

      child.kill("SIGTERM");
      expect(await exited, outputOf()).toBe(0);
      const released = await coordination.readNamespacedLease({ namespace, name: "playbook-controller" });
      expect(released.spec?.holderIdentity ?? "").toBe("");
    } finally {
      child.kill("SIGKILL");
    }
  });
});
