// What a test cluster leaves behind: its state folder (logs/*.log of etcd, kube-apiserver, the
// real node, the controller...) is deleted only when everything that used it passed; when a
// test or the setup failed, or the run was interrupted, it is kept under a name no later run
// sweeps (.cluster/kept-<time>-<pid>), and where it is gets printed. The last KEEP_AT_MOST are kept.
import { existsSync, readdirSync } from "node:fs";
import { rename, rm } from "node:fs/promises";
import path from "node:path";

/** What is known of the run when its cluster is stopped. */
export interface RunOutcome {
  /** The cluster (or what the setup does after it) failed to start. */
  setupFailed?: boolean;
  /** Test files of the project that failed (a failed test, hook or collection). */
  failedFiles: number;
  /** Errors vitest caught outside any test. */
  unhandledErrors: number;
  /** Stopped by SIGINT or SIGTERM before the end. */
  interrupted?: boolean;
}

/** Why the logs are kept, or undefined when all passed and they can go. */
export function whyKeepLogs(outcome: RunOutcome): string | undefined {
  if (outcome.setupFailed) return "the cluster's setup failed";
  if (outcome.interrupted) return "the run was interrupted";
  const reasons: string[] = [];
  if (outcome.failedFiles > 0)
    reasons.push(`${outcome.failedFiles} test file${outcome.failedFiles === 1 ? "" : "s"} failed`);
  if (outcome.unhandledErrors > 0)
    reasons.push(`${outcome.unhandledErrors} unhandled error${outcome.unhandledErrors === 1 ? "" : "s"}`);
  return reasons.length > 0 ? reasons.join(", ") : undefined;
}

/** How many kept folders stay under .cluster: older ones are removed when a new one is kept. */
export const KEEP_AT_MOST = 5;

/** kept-2026-11-30T23-50-01Z-1234: sorts by time, and no test-<pid> sweep matches it. */
export function keptName(pid: number, now: Date = new Date()): string {
  return `kept-${now
    .toISOString()
    .replace(/\.\d+Z$/, "Z")
    .replaceAll(":", "-")}-${pid}`;
}

/**
 * Deletes stateDir when reason is undefined; otherwise moves it to a kept-* sibling, removes the
 * oldest kept folders beyond KEEP_AT_MOST, says where the logs are and returns the new folder.
 */
export async function keepOrRemoveClusterState(
  stateDir: string,
  reason: string | undefined,
  log: (message: string) => void,
): Promise<string | undefined> {
  if (reason === undefined || !existsSync(stateDir)) {
    await rm(stateDir, { recursive: true, force: true });
    return undefined;
  }
  const parent = path.dirname(stateDir);
  const kept = path.join(parent, keptName(process.pid) + (stateDir.endsWith("-real") ? "-real" : ""));
  await rename(stateDir, kept);
  const old = readdirSync(parent)
    .filter((entry) => entry.startsWith("kept-"))
    .sort()
    .slice(0, -KEEP_AT_MOST);
  for (const entry of old) await rm(path.join(parent, entry), { recursive: true, force: true });
  log(`Kept the cluster's logs (${reason}): ${path.join(kept, "logs")}`);
  return kept;
}

interface TaskLike {
  result?: { state?: string; errors?: unknown[] };
  tasks?: TaskLike[];
}

/**
 * For a test file with a cluster of its own: the outcome from the suite vitest passes to
 * afterAll (the file, whose tests have all ended by then), for whyKeepLogs.
 */
export function suiteOutcome(suite: TaskLike): RunOutcome {
  const failed = (task: TaskLike): boolean =>
    task.result?.state === "fail" ||
    (task.result?.errors?.length ?? 0) > 0 ||
    (task.tasks ?? []).some(failed);
  return { failedFiles: failed(suite) ? 1 : 0, unhandledErrors: 0 };
}
