// The log archive's retention in the bench (issue 58, section 4): runs created and deleted with
// the archive on leave no object behind. SeaweedFS's S3 server (test/harness/object-store.ts) is
// started beside the bench cluster, our controller archives to it, and each run's folder is
// filled as an attempt's archive leaves it (its log and its report at the keys archive-keys.ts
// makes: the bench node has no kubelet logs for the archive's writer to follow). Then every
// Playbook is deleted, and what is left under the archive's prefix is counted: the target is 0.
// The finalizer's time per run is from the DELETE to the Playbook gone from the API server.
import { LOG_ARCHIVE_FINALIZER } from "../../src/api/log-archive.js";
import {
  attemptLogKey,
  attemptReportKey,
  type RunIdentity,
} from "../../src/controller/log-archive/archive-keys.js";
import { startObjectStore } from "../harness/object-store.js";
import { inPool } from "./api.js";
import { type BenchCluster, createNamespace, startOurController } from "./bench-cluster.js";
import type { Figure } from "./results.js";
import { percentile } from "./stats.js";
import { finishedPlaybook, PLAYBOOKS } from "./workloads.js";

const PREFIX = "bench/";
// A run's log as an attempt of the settle section's runs prints it, about.
const LOG_BYTES = 4096;

interface Listed {
  items: { metadata: { name: string; uid: string; finalizers?: string[] } }[];
}

export async function archiveOrphans(
  cluster: BenchCluster,
  options: { runs: number; quick: boolean; workers: number; log: (message: string) => void },
): Promise<Figure[]> {
  const { api } = cluster;
  const { log, runs } = options;
  const store = await startObjectStore({
    binDir: cluster.state.binDir,
    stateDir: cluster.state.stateDir,
    bucket: "bench-archive",
  });
  // The controller takes the keys from the SDK's env, as the chart's Deployment gives them.
  process.env.AWS_ACCESS_KEY_ID = store.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = store.secretAccessKey;
  const client = store.client(PREFIX);
  const controller = await startOurController(cluster, {
    workers: options.workers,
    extraArgs: [
      `--log-archive-bucket=${store.bucket}`,
      `--log-archive-endpoint=${store.endpoint}`,
      `--log-archive-prefix=${PREFIX}`,
      "--log-archive-force-path-style",
    ],
  });
  try {
    const namespace = `archive-${Math.random().toString(36).slice(2, 7)}`;
    await createNamespace(api, namespace);
    const collection = `${PLAYBOOKS}/namespaces/${namespace}/playbooks`;
    const names = Array.from({ length: runs }, (_, i) => `archived-${i}`);
    await inPool(names, 32, async (name) => {
      await api.request("POST", collection, finishedPlaybook(name, 0).object);
    });
    // Every run holds the finalizer before it is deleted (the controller puts it on first).
    const held = await until(`${runs} Playbooks to carry ${LOG_ARCHIVE_FINALIZER}`, 120_000, async () => {
      const list = await api.request<Listed>("GET", collection);
      const with_ = list.items.filter((p) => p.metadata.finalizers?.includes(LOG_ARCHIVE_FINALIZER));
      return with_.length === runs ? list.items : undefined;
    });
    const t0 = performance.now();
    await inPool(held, 16, async (p) => {
      const run: RunIdentity = { namespace, name: p.metadata.name, uid: p.metadata.uid };
      await client.putObject(attemptLogKey(PREFIX, run, 1), Buffer.alloc(LOG_BYTES, "x"), "text/plain");
      await client.putObject(attemptReportKey(PREFIX, run, 1), "{}", "application/json");
    });
    const stored = (await client.listKeys(PREFIX)).length;
    log(
      `archive: ${stored} objects of ${runs} runs stored in ${((performance.now() - t0) / 1000).toFixed(1)}s`,
    );

    const deletedAt = new Map<string, number>();
    const goneAfter = new Map<string, number>();
    await inPool(names, 16, async (name) => {
      deletedAt.set(name, performance.now());
      await api.request("DELETE", `${collection}/${name}`);
    });
    await until(`${runs} Playbooks to be gone`, 300_000, async () => {
      const left = new Set((await api.request<Listed>("GET", collection)).items.map((p) => p.metadata.name));
      const at = performance.now();
      for (const name of names)
        if (!left.has(name) && !goneAfter.has(name)) goneAfter.set(name, at - (deletedAt.get(name) ?? at));
      return left.size === 0 ? true : undefined;
    });
    const orphans = (await client.listKeys(PREFIX)).length + (await client.listUploads(PREFIX)).length;
    const times = [...goneAfter.values()].map((ms) => ms / 1000);
    log(`archive: ${orphans} objects left after ${runs} runs deleted`);
    const scaled = options.quick ? ` (--quick: ${runs} runs, not 1,000)` : "";
    return [
      {
        name: "log_archive_orphans_1000",
        value: orphans,
        unit: "objects",
        note: `objects and uploads left under the archive's prefix after ${runs} finished runs, each with its attempt's log and report archived (${stored} objects), were deleted${scaled}; target 0`,
      },
      {
        name: "log_archive_delete_seconds_p50",
        value: at(times, 50),
        unit: "s",
        note: `per run, from its DELETE to the Playbook gone (the finalizer deleted its folder on SeaweedFS, then let it go), ${runs} deleted at once${scaled}; polled every 200 ms`,
      },
      { name: "log_archive_delete_seconds_p99", value: at(times, 99), unit: "s" },
    ];
  } finally {
    await controller.stop();
    client.destroy();
    await store.stop();
  }
}

function at(values: number[], p: number): number | null {
  return values.length === 0 ? null : Math.round(percentile(values, p) * 100) / 100;
}

async function until<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const end = performance.now() + timeoutMs;
  for (;;) {
    const found = await check();
    if (found !== undefined) return found;
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}
