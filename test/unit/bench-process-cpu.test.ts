import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { type CpuReading, cpuByCommand, readTreeCpu } from "../bench/process-cpu.js";

const reading = (rows: [number, string, number][]): CpuReading =>
  new Map(rows.map(([pid, comm, cpuSeconds]) => [pid, { comm, cpuSeconds }]));

describe("the bench's CPU by process", () => {
  it("sums each process's growth by command, a new one from 0, one ended or reused not counted", () => {
    const before = reading([
      [10, "kubelet", 5],
      [11, "weed", 1],
      [12, "containerd-shim", 3],
      [13, "etcd", 2],
    ]);
    const after = reading([
      [10, "kubelet", 7.5],
      [11, "weed", 1.25],
      [14, "weed", 0.5],
      // pid 13 reused by another command: counted from 0
      [13, "sh", 0.25],
    ]);
    expect(Object.fromEntries(cpuByCommand(before, after))).toEqual({ kubelet: 2.5, weed: 0.75, sh: 0.25 });
  });

  it("reads a process tree from /proc: the root, its child, and the labels given", async () => {
    const child = spawn("sh", ["-c", "sleep 30 & wait"], { stdio: "ignore", detached: true });
    const pid = child.pid as number;
    try {
      // Until the shell has started its child, however slow the machine.
      for (let i = 0; i < 200 && readTreeCpu([pid]).size < 2; i++)
        await new Promise((resolve) => setTimeout(resolve, 50));
      const tree = readTreeCpu([pid], new Map([[pid, "the-root"]]));
      expect([...tree.values()].map((p) => p.comm).sort()).toEqual(["sleep", "the-root"]);
      expect(readTreeCpu([pid]).get(pid)?.comm).toBe("sh");
    } finally {
      process.kill(-pid, "SIGKILL");
    }
  });
});
