// How much of the run's ceiling this pod's runner has left, on the node's own clock. The
// controller hands the pod a duration (PLAYBOOK_CEILING_LEFT_MS: what was left when it built the
// pod), not a time: a stamp read against a skewed node clock would shorten or lengthen the run.
// The runner takes from it the time since its pod started on this node, read from the boot clock:
// the age of the pod's pause process (PID 1 of the shared process namespace, started with the
// pod's sandbox, as the kubelet's own activeDeadlineSeconds counts from the pod's start), else the
// runner's own age. The time between the pod's create and its sandbox (scheduling) is not
// counted; the controller's own deadline, counted from the run's start, bounds it.
import { readFileSync } from "node:fs";
import { CEILING_LEFT_ENV_VAR } from "../api/plan.js";

/** USER_HZ: the unit of /proc/PID/stat's times on every architecture Linux runs pods on. */
const CLOCK_TICKS_PER_SECOND = 100;

type ReadText = (path: string) => string;
const readText: ReadText = (path) => readFileSync(path, "utf8");

/** The age in milliseconds of the process `pid` by the boot clock, if /proc tells. */
function processAgeMs(pid: number, read: ReadText): number | undefined {
  try {
    const uptimeSeconds = Number(read("/proc/uptime").split(" ")[0]);
    const stat = read(`/proc/${pid}/stat`);
    // The command (field 2) may hold spaces and parentheses: the fields after its last ")".
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const startTicks = Number(fields[19]); // field 22, starttime
    if (!Number.isFinite(uptimeSeconds) || !Number.isFinite(startTicks)) return undefined;
    return Math.max(0, Math.round(uptimeSeconds * 1000 - (startTicks * 1000) / CLOCK_TICKS_PER_SECOND));
  } catch {
    return undefined;
  }
}

/** How long ago this pod started on its node: its pause process's age, else this process's. */
export function podAgeMs(read: ReadText = readText): number {
  let comm = "";
  try {
    comm = read("/proc/1/comm").trim();
  } catch {}
  const own = Math.round(process.uptime() * 1000);
  if (comm !== "pause") return own;
  const pause = processAgeMs(1, read);
  // The pause process started before the runner did, never after.
  return pause !== undefined && pause >= own ? pause : own;
}

/**
 * What is left of the ceiling now, from the duration the controller handed the pod and the pod's
 * age; undefined when the pod was handed none (a plan from an earlier controller: the stamp rules).
 */
export function handedCeilingLeftMs(env: NodeJS.ProcessEnv, ageMs: number): number | undefined {
  const text = env[CEILING_LEFT_ENV_VAR];
  if (text === undefined) return undefined;
  const handed = Number(text);
  if (!Number.isInteger(handed) || handed < 0) {
    throw new Error(
      `$${CEILING_LEFT_ENV_VAR} must be a whole number of milliseconds, not ${JSON.stringify(text)}`,
    );
  }
  return Math.max(0, handed - ageMs);
}
