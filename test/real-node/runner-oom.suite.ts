// A runner the kernel OOMKills after its progress record said a task Succeeded, on the real
// kubelet (issue 41, item 4): the run ends RunnerLost, and its final status shows that task as
// progress only (Cancelled, verified false, no exit code, times or figures), never Succeeded with
// exit 0; the metrics count no task duration or limit usage for it. Run once per way the agent
// reaches the task containers (runner-oom-image-volume.test.ts, runner-oom-post-start.test.ts).
//
// The runner's memory is its own container's (512Mi), and no task reaches it, so the test fills
// that container's memory cgroup from the node, as root: a helper process joins the runner
// container's memory cgroup (cgroup v1, as this node runs) and allocates until the kernel's OOM
// killer has ended the runner. The killer takes the process of the most points, its resident
// memory plus oom_score_adj thousandths of the cgroup's limit: the kubelet gives a Burstable
// container's processes nearly 1000 (the helper has 0), so the runner outweighs a helper that
// could never hold the whole limit. The kubelet then reports the runner's container OOMKilled, as
// for a runner that outgrew its limit itself.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { realNode, runnerOf } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  getPlaybook,
  type PlaybookObject,
  type RunningController,
  startController,
  waitForFinished,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace, marker } from "../harness/cluster-test.js";
import type { AgentLayout } from "../harness/task-images.js";

const INTERVAL_MS = 2_000;

type TaskView = {
  name: string;
  phase: string;
  verified?: boolean;
  exitCode?: number | null;
  message?: string;
} & Record<string, unknown>;
const tasksOf = (playbook: PlaybookObject): TaskView[] =>
  ((playbook.status as { tasks?: TaskView[] } | undefined)?.tasks ?? []) as TaskView[];

/** The runner container's memory cgroup folder (cgroup v1), from the runner's /proc entry. */
function memoryCgroupOf(pid: number): string {
  const line = readFileSync(`/proc/${pid}/cgroup`, "utf8")
    .split("\n")
    .find((entry) => /^\d+:([^:]*,)?memory(,[^:]*)?:/.test(entry));
  if (!line) throw new Error(`process ${pid} has no cgroup v1 memory controller line`);
  return `/sys/fs/cgroup/memory${line.slice(line.lastIndexOf(":") + 1)}`;
}

// The helper, in its own Node process: it joins the cgroup and holds 8 MiB more at a time
// (filled, so charged to the cgroup) until the runner is gone or a zombie.
const FILL = `
const fs = require("node:fs");
const [cgroup, runner] = process.argv.slice(1);
fs.writeFileSync(cgroup + "/cgroup.procs", String(process.pid));
const gone = () => {
  try { return / Z /.test(fs.readFileSync("/proc/" + runner + "/stat", "utf8").replace(/^.*\\)/, "")); }
  catch { return true; }
};
const held = [];
while (!gone() && held.length < 256) held.push(Buffer.alloc(8 << 20, 1));
console.log(gone() ? "runner gone after " + held.length * 8 + " MiB" : "runner still there after 2 GiB");
`;

/**
 * Fills the runner's container memory until the kernel OOM-kills the runner; what the helper said.
 * The kernel may take the helper first (its own resident set grows with every step): then a new
 * helper, whose set starts small again, goes on, up to five.
 */
async function oomKillRunner(runner: number): Promise<string> {
  const gone = () => {
    try {
      return / Z /.test(readFileSync(`/proc/${runner}/stat`, "utf8").replace(/^.*\)/, ""));
    } catch {
      return true;
    }
  };
  let said = "";
  for (let helper = 1; helper <= 5; helper++) {
    // The kernel may have taken a helper and the runner in the same pass.
    if (gone()) return said || `runner gone after ${helper - 1} helper(s) the kernel ended`;
    said = await fillRunnerMemory(runner);
    if (said !== "") return said;
  }
  return gone() ? "runner gone after 5 helper(s) the kernel ended" : said;
}

function fillRunnerMemory(runner: number): Promise<string> {
  const cgroup = memoryCgroupOf(runner);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["-e", FILL, cgroup, String(runner)], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.on("error", reject);
    child.on("close", () => resolve(out.trim()));
  });
}

export function runnerOomSuite({ setting, delivery }: AgentLayout): void {
  describe(`with the agent delivered by ${delivery}`, () => {
    const { core } = clients();
    let namespace = "";
    let controller: RunningController | undefined;

    beforeAll(async () => {
      namespace = await createTestNamespace(core, "rn-runner-oom");
      controller = startController([namespace], {
        ...realNode.controller,
        agentDelivery: setting,
        progressInterval: `${INTERVAL_MS / 1000}s`,
      });
    });
    afterAll(async () => {
      await controller?.stop();
      if (namespace) await deleteTestNamespace(core, namespace);
    });

    it("ends RunnerLost with the task its progress said Succeeded shown Cancelled and unverified, and counts no task duration", async () => {
      const name = `oom-${delivery}`;
      const mark = marker();
      await createPlaybook(namespace, name, {
        ceiling: "3m",
        tasks: [
          // A timeout, so that a duration taken from the record would count in the usage histogram too.
          { name: "build", run: "echo built", timeout: "1m" },
          { name: "hold", run: `echo ${mark}; sleep 120 # ${mark}` },
        ],
      });
      // The runner's record, read by the controller: build Succeeded with exit 0, hold running.
      const shown = await eventually(
        `status to show build Succeeded and hold running from ${name}'s progress`,
        async () => {
          const playbook = await getPlaybook(namespace, name).catch(() => undefined);
          const [build, hold] = playbook ? tasksOf(playbook) : [];
          return build?.phase === "Succeeded" && hold?.phase === "Running" ? playbook : undefined;
        },
        realNode.taskStartMs + realNode.finishMs,
      );
      const [build, hold] = tasksOf(shown);
      expect(build).toMatchObject({ phase: "Succeeded", exitCode: 0, verified: false });
      expect(build?.completionTime).toBeDefined();
      expect(hold).toMatchObject({ phase: "Running", verified: false });

      const runner = await runnerOf(mark, realNode.taskStartMs);
      // The kubelet's score for the runner's Burstable container (1000 less its share of the node's memory).
      expect(Number(readFileSync(`/proc/${runner}/oom_score_adj`, "utf8"))).toBeGreaterThanOrEqual(900);
      expect(await oomKillRunner(runner)).toMatch(
        /^runner gone after \d+ (MiB|helper\(s\) the kernel ended)$/,
      );

      const ended = await waitForFinished(namespace, name, realNode.finishMs);
      const succeeded = condition(ended, "Succeeded");
      expect(succeeded).toMatchObject({ status: "False", reason: "RunnerLost" });
      // The kubelet's word: the kernel ended the runner for its memory.
      expect(succeeded?.message).toMatch(
        new RegExp(`^pod ${name}-1 ended without a valid runner report \\(.*OOMKilled, exit code 137.*\\): `),
      );
      expect(succeeded?.message).toContain("the kernel ended the runner for its own container's 512Mi");

      // What `kubectl get pb -o yaml` shows: no task Succeeded, no exit code, no times or figures.
      const tasks = tasksOf(ended);
      expect(tasks.map((t) => [t.name, t.phase, t.verified])).toEqual([
        ["build", "Cancelled", false],
        ["hold", "Cancelled", false],
      ]);
      for (const task of tasks) {
        for (const field of [
          "exitCode",
          "signal",
          "startTime",
          "completionTime",
          "cpuSeconds",
          "peakMemoryBytes",
        ])
          expect(task, `${task.name}.${field}`).not.toHaveProperty(field);
        expect(task.message).toMatch(/^not reported: the run ended without the runner's report/);
      }
      expect(JSON.stringify(tasks)).not.toContain("Succeeded");
      expect((ended.status as { endingTask?: string }).endingTask).toBeUndefined();

      // The metrics: the run counted once, no task duration nor task limit usage from the record.
      const runs = await eventually("the run counted", async () => {
        const metric = await controller?.controller.metrics.runDuration.get();
        const count = metric?.values.find(
          (v) =>
            v.metricName === "playbook_run_duration_seconds_count" &&
            v.labels.namespace === namespace &&
            v.labels.reason === "RunnerLost",
        );
        return count && count.value > 0 ? count.value : undefined;
      });
      expect(runs).toBe(1);
      const durations = await controller?.controller.metrics.taskDuration.get();
      expect(
        durations?.values.filter(
          (v) =>
            v.metricName === "playbook_task_duration_seconds_count" &&
            v.labels.namespace === namespace &&
            v.value > 0,
        ),
      ).toEqual([]);
      const usage = await controller?.controller.metrics.limitUsage.get();
      expect(
        usage?.values.filter(
          (v) =>
            v.metricName === "playbook_task_limit_usage_ratio_count" &&
            v.labels.namespace === namespace &&
            v.labels.limit === "TaskTimeout" &&
            v.value > 0,
        ),
      ).toEqual([]);
    });
  });
}
