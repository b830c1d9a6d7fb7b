// Telling that the kernel's OOM killer ended a task's process: the count of OOM kills of the
// runner's memory cgroup (a pod's container, which the tasks share), else of the whole machine,
// read before and after an attempt. The runner outlived the kill (it raised its tasks'
// oom_score_adj, see containment.ts), so a kill in between was one of the task's.
import { ownCgroupDir, ownCgroupDirOf } from "./containment.js";
import { fieldIn, readKept } from "./kept-file.js";

// Read before and after every attempt: the file is kept open (kept-file.ts).
function fieldOf(file: string, name: string): number | null {
  const text = readKept(file);
  return text === null ? null : fieldIn(text, name);
}

export interface OomCounter {
  /** where the count comes from, for the message */
  scope: string;
  read: () => number | null;
}

/** The narrowest OOM kill count this process can read: its memory cgroup's, else the machine's. */
export function oomCounter(): OomCounter | null {
  const v2 = ownCgroupDir();
  if (v2 !== null && fieldOf(`${v2}/memory.events`, "oom_kill") !== null) {
    return { scope: "in the runner's memory cgroup", read: () => fieldOf(`${v2}/memory.events`, "oom_kill") };
  }
  const v1 = ownCgroupDirOf("memory");
  if (v1 !== null && fieldOf(`${v1}/memory.oom_control`, "oom_kill") !== null) {
    return {
      scope: "in the runner's memory cgroup",
      read: () => fieldOf(`${v1}/memory.oom_control`, "oom_kill"),
    };
  }
  if (fieldOf("/proc/vmstat", "oom_kill") !== null) {
    return { scope: "on this machine", read: () => fieldOf("/proc/vmstat", "oom_kill") };
  }
  return null;
}
