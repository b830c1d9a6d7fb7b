// The runner outlives its tasks under memory pressure: a run whose tasks take its memory cgroup
// past its limit ends with the task failed, the OOM kill named, and a report, never with the
// runner killed. The kernel picks by size; here every task process is smaller than the runner,
// so only the tasks' raised oom_score_adj makes it pick one of them.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { decodeReport } from "../../src/api/report.js";
import { ownCgroupDir } from "../../src/pod-runner/containment.js";
import { CLI } from "../support/cli.js";

const LIMIT_BYTES = 96 * 1024 * 1024;

/** A memory cgroup with a limit this suite may make: cgroup v1's memory hierarchy, or v2's. */
function makeMemoryCgroup(): { dir: string; procs: string } | null {
  const candidates: { parent: string; limitFile: string }[] = [];
  try {
    for (const line of readFileSync("/proc/self/cgroup", "utf8").split("\n")) {
      const [, controllers, path] = line.split(":");
      if (controllers?.split(",").includes("memory") && path !== undefined) {
        candidates.push({
          parent: `/sys/fs/cgroup/memory${path === "/" ? "" : path}`,
          limitFile: "memory.limit_in_bytes",
        });
      }
    }
  } catch {
    return null;
  }
  const v2 = ownCgroupDir();
  if (v2 !== null) candidates.push({ parent: v2, limitFile: "memory.max" });
  for (const { parent, limitFile } of candidates) {
    const dir = join(parent, `playbook-oom-test-${process.pid}`);
    try {
      mkdirSync(dir);
    } catch {
      continue;
    }
    if (!existsSync(join(dir, limitFile))) {
      rmdirSync(dir);
      continue;
    }
    writeFileSync(join(dir, limitFile), String(LIMIT_BYTES));
    return { dir, procs: join(dir, "cgroup.procs") };
  }
  return null;
}

const memoryCgroup = process.getuid?.() === 0 ? makeMemoryCgroup() : null;

afterAll(async () => {
  // The runner ended what its tasks left; the kernel empties the group a moment later.
  for (let tries = 0; memoryCgroup && tries < 50; tries++) {
    try {
      rmdirSync(memoryCgroup.dir);
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
});

describe("a task that runs into the memory limit", () => {
  // Skipped only where no memory cgroup with a limit can be made (it needs root and a memory
  // controller, v1 or v2).
  it.skipIf(memoryCgroup === null)(
    "fails with the OOM kill named, and the runner lives to write its report",
    async () => {
      const cgroup = memoryCgroup as { dir: string; procs: string };
      const dir = mkdtempSync(join(tmpdir(), "oom-"));
      const file = join(dir, "playbook.yaml");
      const reportFile = join(dir, "report.json");
      // Five processes of about 26 MiB each (perl's "x" operator leaves two copies of 12 MiB),
      // each smaller than the runner (a Node process of about 60 MiB resident, 20 MiB of it charged
      // to the cgroup): together they pass the limit.
      const hog = `perl -e '$x = "a" x (12*1024*1024); sleep 4'`;
      const run = [
        'pids=""',
        `for i in 1 2 3 4 5; do ${hog} & pids="$pids $!"; done`,
        'for p in $pids; do wait "$p" || exit "$?"; done',
      ].join("\n");
      writeFileSync(
        file,
        stringify({
          apiVersion: "playbook.dev/v1alpha1",
          kind: "Playbook",
          metadata: { name: "hog" },
          spec: {
            killGrace: "0s",
            tasks: [
              { name: "hog", run },
              { name: "after", run: "echo never" },
            ],
          },
        }),
      );
      // The runner joins the limited cgroup before it starts, so it and its tasks share the limit.
      const child = spawn(
        "sh",
        [
          "-c",
          'echo $$ > "$0" && exec "$@"',
          cgroup.procs,
          process.execPath,
          CLI,
          "run",
          "-f",
          file,
          "--report",
          reportFile,
        ],
        { env: { PATH: process.env.PATH, HOME: process.env.HOME }, stdio: ["ignore", "pipe", "pipe"] },
      );
      let stderr = "";
      child.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      child.stdout.resume();
      const [code, signal] = await new Promise<[number | null, string | null]>((resolve) =>
        child.on("close", (c, s) => resolve([c, s])),
      );
      // Not the runner killed (signal SIGKILL, no report): the task failed, and said why.
      expect({ code, signal }).toEqual({ code: 1, signal: null });
      const report = decodeReport(readFileSync(reportFile, "utf8"));
      expect(report.reason).toBe("TaskFailed");
      expect(report.tasks[0]).toMatchObject({ p: "Failed", x: 137 });
      expect(report.tasks[0]?.m).toMatch(
        /^out of memory: the kernel's OOM killer ended \d+ process\(es\) in the runner's memory cgroup during the attempt \(SIGKILL\)/,
      );
      expect(report.tasks[1]).toMatchObject({ p: "Skipped" });
      expect(stderr).toMatch(
        /playbook: task hog Failed in \S+ \(exit code 137(?:, cpu \S+)?(?:, peak [^)]+)?\)/,
      );
      expect(stderr).toContain("out of memory: the kernel's OOM killer ended");
    },
  );
});
