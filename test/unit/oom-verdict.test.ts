// What the controller makes of an OOM kill in a pod. Containerd marks the runner container
// OOMKilled whenever its memory cgroup had an OOM kill, also when the kernel ended only a task's
// process (the tasks start at oom_score_adj 1000) and the runner lived to report: the report
// decides then, and the task's failure names the OOM kill. Only a pod whose runner was killed
// itself (no report) is RunnerLost, with what the kubelet said.
import { describe, expect, it } from "vitest";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import { decide, type ReconcileInput } from "../../src/controller/reconcile.js";
import { at, playbook, pod, report, SETTINGS, T0 } from "./controller-fixtures.js";

function input(partial: Partial<ReconcileInput>): ReconcileInput {
  return { playbook: playbook(), pods: [], now: T0, settings: SETTINGS, ...partial };
}

function started(): PlaybookStatus {
  const first = decide(input({}));
  return { ...(first.status as PlaybookStatus), podAttempts: 1, podName: "nightly-1" };
}

const OOM_DETAIL =
  "out of memory: the kernel's OOM killer ended 1 process(es) in the runner's memory cgroup during the attempt (SIGKILL)";

describe("an OOM kill in a pod", () => {
  it("of a task: the runner's report decides, TaskFailed with the OOM kill named, though the kubelet says OOMKilled", () => {
    const message = report({
      phase: "Failed",
      reason: "TaskFailed",
      tasks: [
        {
          name: "build",
          phase: "Failed",
          attempts: 1,
          exitCode: 137,
          signal: null,
          startTime: at(1),
          completionTime: at(2),
          detail: OOM_DETAIL,
        },
        { name: "test", phase: "Skipped", attempts: 0, exitCode: null, signal: null },
      ],
      containment: "none",
    });
    const ended = pod(1, {
      phase: "Failed",
      terminated: { exitCode: 1, reason: "OOMKilled", message, finishedAt: at(3).toISOString() },
    });
    const decision = decide(input({ playbook: playbook({}, started()), pods: [ended], now: at(3) }));
    const condition = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(condition).toMatchObject({ status: "False", reason: "TaskFailed" });
    expect(condition?.message).toBe(`task build exited with code 137: ${OOM_DETAIL}`);
  });

  it("of the runner: RunnerLost, naming what the kubelet said", () => {
    const ended = pod(1, {
      phase: "Failed",
      terminated: { exitCode: 137, reason: "OOMKilled", message: "", finishedAt: at(3).toISOString() },
    });
    const decision = decide(input({ playbook: playbook({}, started()), pods: [ended], now: at(20) }));
    const condition = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(condition).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(condition?.message).toContain("OOMKilled, exit code 137");
  });

  it("of the runner outside a Guaranteed pod: the message says how to keep the runner alive", () => {
    const ended = (qosClass: string) => {
      const base = pod(1, {
        phase: "Failed",
        terminated: { exitCode: 137, reason: "OOMKilled", message: "", finishedAt: at(3).toISOString() },
      });
      return { ...base, status: { ...base.status, qosClass } };
    };
    const messageOf = (qosClass: string) =>
      decide(
        input({ playbook: playbook({}, started()), pods: [ended(qosClass)], now: at(20) }),
      ).status?.conditions?.find((c) => c.type === "Succeeded")?.message;
    const hint =
      "the kernel ended the runner for the pod's memory limit, which its tasks share: give the pod both cpu and memory limits (requests equal, a Guaranteed pod)";
    expect(messageOf("Burstable")).toContain(hint);
    // Guaranteed and still OOMKilled: the runner itself was too big; no advice that would not help.
    expect(messageOf("Guaranteed")).not.toContain(hint);
  });
});
