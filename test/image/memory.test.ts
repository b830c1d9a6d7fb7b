// The runner in the project's image outlives its tasks under memory pressure: a container with a
// memory limit that a task runs past ends the run TaskFailed with the OOM kill named and a report,
// not with the runner killed. Every task process here is smaller than the runner, so only the
// tasks' raised oom_score_adj makes the kernel pick one of them.

import { existsSync } from "node:fs";
import path from "node:path";
import type { StartedTestContainer } from "testcontainers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { decodeReport } from "../../src/api/report.js";
import { repoRoot } from "../harness/binaries.js";
import { removeContainer, startImageContainer } from "./support.js";

/** What podman's conmon leaves in its working directory after an OOM kill in its container. */
const STRAY_OOM = path.join(repoRoot(), "oom");
const strayBefore = existsSync(STRAY_OOM);

// Five processes of about 26 MiB each (perl's "x" operator leaves two copies of 12 MiB).
const HOG = `perl -e '$x = "a" x (12*1024*1024); sleep 4'`;
const HOG_PLAYBOOK = stringify({
  apiVersion: "playbook.dev/v1alpha1",
  kind: "Playbook",
  metadata: { name: "hog" },
  spec: {
    killGrace: "0s",
    tasks: [
      {
        name: "hog",
        run: [
          'pids=""',
          `for i in 1 2 3 4 5; do ${HOG} & pids="$pids $!"; done`,
          'for p in $pids; do wait "$p" || exit "$?"; done',
        ].join("\n"),
      },
      { name: "after", run: "echo never" },
    ],
  },
});

describe("a task that runs into the container's memory limit", () => {
  let container: StartedTestContainer;
  beforeAll(async () => {
    container = await startImageContainer((c) =>
      // 96 MiB: the runner (about 60 MiB resident) and two or three of the task's processes.
      c
        .withResourcesQuota({ memory: 96 / 1024 })
        .withCopyContentToContainer([{ content: HOG_PLAYBOOK, target: "/home/hog.yaml", mode: 0o644 }]),
    );
  });
  afterAll(async () => {
    if (container) await removeContainer(container);
  });

  it("fails with the OOM kill named, and the runner lives to write its report", async () => {
    const run = await container.exec([
      "playbook",
      "run",
      "-f",
      "/home/hog.yaml",
      "--report",
      "/tmp/report.json",
    ]);
    // Not the runner killed (137, no report): the task failed (1), and said why.
    expect(run.exitCode).toBe(1);
    expect(run.output).toMatch(/playbook: task hog Failed in \S+ \(exit code 137[,)]/);
    expect(run.output).toContain("out of memory: the kernel's OOM killer ended");
    const report = decodeReport((await container.exec(["cat", "/tmp/report.json"])).stdout);
    expect(report.reason).toBe("TaskFailed");
    expect(report.tasks[0]).toMatchObject({ p: "Failed", x: 137 });
    expect(report.tasks[0]?.m).toMatch(
      /^out of memory: the kernel's OOM killer ended \d+ process\(es\) in the runner's memory cgroup/,
    );
    expect(report.tasks[1]).toMatchObject({ p: "Skipped" });
  });

  // Skipped where a file of that name was there before (it cannot be told apart).
  it.skipIf(strayBefore)("leaves no file named oom in the checkout the tests run from", () => {
    expect(existsSync(STRAY_OOM), `${STRAY_OOM} was written during the OOM kill`).toBe(false);
  });
});
