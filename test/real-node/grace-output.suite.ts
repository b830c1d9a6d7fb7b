// Output through a long kill grace on the real kubelet (issue 41, item 2): a task that ignores
// SIGTERM and prints without pause through a 20 s grace must not grow the pod's runner: once the
// stop lets the agent's connection go (its exit and its pipes' ends queue behind the output), the
// runner keeps at most 1 MiB of a stream for a reader that is behind and drops the rest, saying
// how much. A runner that queued it all passed its container's 512Mi and was OOMKilled: the run
// ended RunnerLost instead of TaskTimeout. Run once per way the agent reaches the task containers
// (grace-output-image-volume.test.ts, grace-output-post-start.test.ts).
import { closeSync, openSync, readdirSync, readFileSync, readlinkSync, readSync, statSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  kubectlResult,
  podsOf,
  type RunningController,
  startController,
  waitForFinished,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace, marker } from "../harness/cluster-test.js";
import { realNodePodLogsDir } from "../harness/real-node/real-node.js";
import { type AgentLayout, importTaskImages, TASK_IMAGES } from "../harness/task-images.js";

const { core } = clients();
const log = (message: string) => process.stderr.write(`[grace-output] ${message}\n`);
let namespace = "";
let controller: RunningController | undefined;

const read = (pid: string, file: string): string => {
  try {
    return readFileSync(`/proc/${pid}/${file}`, "utf8");
  } catch {
    return "";
  }
};
const pidNamespace = (pid: string): string => {
  try {
    return readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return "";
  }
};

/** The pod runner's pid on this machine: the pod-runner in the PID namespace of the task that prints `mark`. */
function runnerOfTask(mark: string): string | undefined {
  const pids = readdirSync("/proc").filter((entry) => /^\d+$/.test(entry));
  const task = pids.find((pid) => read(pid, "cmdline").includes(mark));
  if (task === undefined) return undefined;
  const ns = pidNamespace(task);
  return pids.find((pid) => pidNamespace(pid) === ns && read(pid, "cmdline").includes("pod-runner"));
}

const MIB = 1024 * 1024;

/**
 * The runner's own last lines ("playbook: ..."), from the node's own log files. `kubectl logs`
 * reads only the newest file, which the kubelet's rotation of a log gigabytes long may have left
 * empty after the container ended; the files are read newest first until the finished line is in.
 */
function runnerLogTail(namespace: string, pod: string, uid: string): string[] {
  const dir = path.join(
    realNodePodLogsDir(path.dirname(inject("kubeconfig"))),
    `${namespace}_${pod}_${uid}`,
    "runner",
  );
  const files = readdirSync(dir)
    .filter((file) => !file.endsWith(".gz") && !file.endsWith(".tmp"))
    .map((file) => path.join(dir, file))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  // The runner's own lines only: after the finished line the run's end still writes what the
  // task's streams held (at most 1 MiB each, with prefixes and the runtime's stamps some 3 MiB),
  // so the end of the newest files, not a fixed count of lines, holds them.
  let own: string[] = [];
  for (const file of files) {
    const size = statSync(file).size;
    const length = Math.min(size, 8 * 1024 * 1024);
    const buffer = Buffer.alloc(length);
    const fd = openSync(file, "r");
    try {
      readSync(fd, buffer, 0, length, size - length);
    } finally {
      closeSync(fd);
    }
    // CRI's format: TIME STREAM TAG CONTENT.
    const lines = buffer
      .toString("utf8")
      .split("\n")
      .map((line) => /^\S+ (?:stdout|stderr) [FP] (.*)$/.exec(line)?.[1])
      .filter((line): line is string => line?.startsWith("playbook: ") === true);
    own = [...lines, ...own];
    if (own.some((line) => line.startsWith("playbook: task flood TimedOut"))) break;
  }
  return own.slice(-100);
}

export function graceOutputSuite({ setting, delivery }: AgentLayout): void {
  describe(`with the agent delivered by ${delivery}`, () => {
    beforeAll(async () => {
      await importTaskImages(inject("kubeconfig"), log);
      namespace = await createTestNamespace(core, "rn-grace");
      const policy = {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: "PlaybookPolicy",
        metadata: { name: "default", namespace },
        spec: { allowedImages: ["playbook.test/*"] },
      };
      const applied = await kubectlResult(["apply", "--server-side", "-f", "-"], JSON.stringify(policy));
      expect(applied.stderr).toBe("");
      controller = startController([namespace], { ...realNode.controller, agentDelivery: setting });
    });
    afterAll(async () => {
      await controller?.stop();
      if (namespace) await deleteTestNamespace(core, namespace);
    });

    it("a task that ignores SIGTERM and prints through a 20 s grace: the runner's memory stays bounded, the run ends TaskTimeout (Killed), the log says what was dropped", async () => {
      const name = "grace-flood";
      const mark = `flood-${marker()}`;
      await createPlaybook(namespace, name, {
        ceiling: "3m",
        killGrace: "20s",
        tasks: [
          {
            name: "flood",
            image: TASK_IMAGES.debian,
            timeout: "3s",
            run: `trap '' TERM; exec yes ${mark}`,
          },
        ],
      });
      // The runner's peak resident set (VmHWM), read on this machine, where containerd runs the pod.
      let runner: string | undefined;
      let peak = 0;
      let finished = false;
      const sampling = (async () => {
        while (!finished) {
          runner ??= runnerOfTask(mark);
          if (runner !== undefined) {
            const kib = /VmHWM:\s+(\d+)/.exec(read(runner, "status"))?.[1];
            if (kib !== undefined) peak = Math.max(peak, Number(kib) * 1024);
          }
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      })();
      const playbook = await waitForFinished(namespace, name, realNode.finishMs);
      finished = true;
      await sampling;
      expect(runner, "the runner was seen").toBeDefined();
      // The true reason, not RunnerLost: the runner lived through the grace and reported.
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "TaskTimeout" });
      expect(playbook.status?.tasks?.[0]).toMatchObject({
        phase: "TimedOut",
        limit: "TaskTimeout",
        ending: "Killed",
      });
      const [pod] = await podsOf(namespace, name);
      const terminated = pod?.status?.containerStatuses?.find((s) => s.name === "runner")?.state?.terminated;
      expect(terminated?.reason).not.toBe("OOMKilled");
      // Gigabytes passed through it in the grace; it held some 100 MiB of garbage over its start.
      // The build that queued them passed its 512Mi within 10 s.
      expect(peak).toBeGreaterThan(0);
      expect(peak / MIB).toBeLessThan(320);
      // The log is gigabytes long: its end holds the run's own lines (what was dropped, if any,
      // then the finished line).
      const lines = runnerLogTail(namespace, `${name}-1`, pod?.metadata?.uid ?? "");
      expect(lines.join("\n")).toMatch(/^playbook: task flood TimedOut in \S+ \(TaskTimeout, Killed/m);
      const dropped = lines.filter((line) => line.includes("bytes of its output"));
      for (const line of dropped) {
        expect(line).toMatch(
          /^playbook: task flood: dropped \d+ bytes of its output that came (after its stop|at the run's end) faster than the runner's stdout took it$/,
        );
      }
      log(`runner peak ${Math.round(peak / MIB)} MiB; ${dropped.join("; ") || "nothing dropped"}`);
    });
  });
}
