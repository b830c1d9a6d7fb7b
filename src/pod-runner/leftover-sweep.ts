// The end-of-run sweep: ends whatever the run's tasks left running, kept apart from run.ts as its own concern.
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { writeCancelFiles, writeCancelFilesOf } from "./cancel-file.js";
import type { Containment } from "./containment.js";
import { killUntilGone, type ProcessTable, sendSignal } from "./process-table.js";

export interface Sweep {
  runCookie: string;
  /** nothing started before the run's first process can be one of its processes */
  startedFrom: number;
  /** the leftovers were given their cancel file and SIGTERM with a stopped task */
  alreadyWarned: boolean;
  graceMs: number;
  cancelFileOf: (attemptId: string) => string;
  cancelText: string;
  hurry?: AbortSignal;
  table: ProcessTable;
}

/**
 * Ends whatever the run's tasks left running: the cancel file of each attempt that left one,
 * SIGTERM, the grace window, then SIGKILL. They are found by the run's cookie only: the groups
 * of earlier attempts may be empty by now and their ids taken by unrelated processes, so a group
 * id alone is no proof of ownership here.
 */
export async function sweepLeftovers(
  sweep: Sweep,
  containment: Containment,
  /** false between the main and the finally tasks: the containment must hold the finally tasks too */
  fence = true,
): Promise<{ found: number; ended: number; warnings: string[] }> {
  // By the cookie, and everything the containment holds: what dropped or hid the cookie too.
  const find = async () => [
    ...new Set([
      ...(await sweep.table.scan({ cookiePrefix: sweep.runCookie, startedFrom: sweep.startedFrom })),
      ...containment.members(),
    ]),
  ];
  const initial = await find();
  if (initial.length === 0) return { found: 0, ended: 0, warnings: [] };
  let warnings: string[] = [];
  // Warned already means they were told with the task that stopped the run: no second SIGTERM.
  if (!sweep.alreadyWarned && sweep.graceMs > 0) {
    warnings = containment.liveAttempts
      ? writeCancelFiles(containment.liveAttempts(), sweep.cancelFileOf, sweep.cancelText)
      : await writeCancelFilesOf(sweep.table, initial, sweep.runCookie, sweep.cancelFileOf, sweep.cancelText);
    for (const pid of initial) (containment.signal ?? sendSignal)(pid, "SIGTERM");
  }
  const graceEnds = performance.now() + sweep.graceMs;
  // A second Ctrl-C cuts this grace short as it does a task's.
  while (performance.now() < graceEnds && !sweep.hurry?.aborted && (await find()).length > 0) await sleep(20);
  const killBy = performance.now() + 5000;
  if (!fence) {
    // No fence (a cgroup's would end its anchor too): each process found is killed, through its
    // agent where the runner may not signal it.
    if (!(await killUntilGone(find, killBy, containment.signal ?? sendSignal)))
      warnings.push("some of the main tasks' processes could not be ended before the finally tasks");
  } else {
    // Where the runner may not signal the tasks itself (agent mode), the fence below is the kill.
    if (!containment.signal) await killUntilGone(find, killBy);
    // The fence: whatever the looks missed (a fork between them) ends with the whole cgroup.
    if (!(await containment.killAll(killBy))) warnings.push("some of the run's processes could not be ended");
  }
  // Ended is what is seen gone, not what was told to go: a stopped agent carries out no kill.
  const still = new Set(await find());
  return { found: initial.length, ended: initial.filter((pid) => !still.has(pid)).length, warnings };
}
