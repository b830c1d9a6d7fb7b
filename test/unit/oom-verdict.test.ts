// What the controller makes of an OOM kill in a pod. Each task runs in the container of its
// image, under that container's memory limit: when the kernel ends a task container (OOMKilled),
// the runner lives, reports the task Failed naming the lost container (report field k), and the
// controller says what the kubelet said of that container. The runner has a container and a limit
// of its own: a runner OOMKilled wrote no report it can be trusted for, and the run is RunnerLost.
import { describe, expect, it } from "vitest";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import { decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
import { at, playbook, pod, recordedStatus, report, SETTINGS, T0 } from "./controller-fixtures.js";

function input(partial: Partial<ReconcileInput>): ReconcileInput {
  return { playbook: playbook(), pods: [], now: T0, settings: SETTINGS, ...partial };
}

function started(): PlaybookStatus {
  const first = decide(input({}));
  return recordedStatus(first);
}

describe("an OOM kill in a pod", () => {
  it("of a task container: the runner's report decides, TaskFailed naming the container, its image and the kubelet's reason", () => {
    const message = report({
      phase: "Failed",
      reason: "TaskFailed",
      tasks: [
        {
          name: "build",
          phase: "Failed",
          attempts: 1,
          exitCode: null,
          signal: "SIGKILL",
          startTime: at(1),
          completionTime: at(2),
          lostContainer: "task-1",
        },
        { name: "test", phase: "Skipped", attempts: 0, exitCode: null, signal: null },
      ],
      containment: "agents",
      completionTime: at(2),
    });
    const base = pod(1, {
      phase: "Failed",
      terminated: { exitCode: 1, reason: "Error", message, finishedAt: at(3).toISOString() },
    });
    const ended = {
      ...base,
      spec: {
        containers: [
          { name: "runner", image: "runner:test" },
          { name: "task-1", image: "runner:test" },
        ],
      },
      status: {
        ...base.status,
        containerStatuses: [
          ...(base.status?.containerStatuses ?? []),
          {
            name: "task-1",
            state: { terminated: { exitCode: 137, reason: "OOMKilled", startedAt: T0.toISOString() } },
          },
        ],
      },
    };
    const decision = decide(input({ playbook: playbook({}, started()), pods: [ended], now: at(3) }));
    const condition = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(condition).toMatchObject({ status: "False", reason: "TaskFailed" });
    expect(condition?.message).toBe(
      "task build failed: container task-1 (image runner:test) was OOMKilled (exit 137)",
    );
    expect(decision.status?.tasks?.[0]).toMatchObject({
      name: "build",
      phase: "Failed",
      image: "runner:test",
      message: "container task-1 (image runner:test) was OOMKilled (exit 137)",
    });
  });

  it("of the runner, though it left a message: not trusted, RunnerLost", () => {
    const message = report({
      phase: "Succeeded",
      reason: "Succeeded",
      tasks: [
        { name: "build", phase: "Succeeded", attempts: 1, exitCode: 0, signal: null },
        { name: "test", phase: "Succeeded", attempts: 1, exitCode: 0, signal: null },
      ],
    });
    const ended = pod(1, {
      phase: "Failed",
      terminated: { exitCode: 137, reason: "OOMKilled", message, finishedAt: at(3).toISOString() },
    });
    const decision = decide(input({ playbook: playbook({}, started()), pods: [ended], now: at(20) }));
    const condition = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(condition).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(condition?.message).toContain("the runner container did not end on its own");
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

  it("of the runner: the message says the runner's own limit, which its tasks do not share", () => {
    const ended = pod(1, {
      phase: "Failed",
      terminated: { exitCode: 137, reason: "OOMKilled", message: "", finishedAt: at(3).toISOString() },
    });
    const message = decide(
      input({ playbook: playbook({}, started()), pods: [ended], now: at(20) }),
    ).status?.conditions?.find((c) => c.type === "Succeeded")?.message;
    expect(message).toContain(
      "the kernel ended the runner for its own container's 512Mi memory limit (the tasks run in their own containers and do not share it)",
    );
  });
});
