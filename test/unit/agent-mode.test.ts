// Agent mode's small decisions: which container a task runs in, $PLAYBOOK_TASK_CONTAINERS and
// $PLAYBOOK_TASK_UIDS.
import { describe, expect, it } from "vitest";
import type { TaskSpec } from "../../src/api/playbook.js";
import { containerOfTask, taskContainersFrom, taskUidsFrom } from "../../src/pod-runner/agent-mode.js";

const task = (extra: object = {}) => ({ name: "t", run: "true", env: [], ...extra }) as unknown as TaskSpec;
const containers = { "task-1": "playbook.test/debian:1", "task-2": "playbook.test/musl:1" };

describe("containerOfTask", () => {
  it("takes the container the plan names", () => {
    expect(containerOfTask(task({ image: "playbook.test/debian:1" }), containers, "task-2")).toBe("task-2");
  });
  it("else the only container", () => {
    expect(containerOfTask(task(), { "task-1": "x" })).toBe("task-1");
  });
  it("else the first container with the task's image, else the first", () => {
    expect(containerOfTask(task({ image: "playbook.test/musl:1" }), containers)).toBe("task-2");
    expect(containerOfTask(task(), containers)).toBe("task-1");
  });
});

describe("taskContainersFrom", () => {
  it("is null when unset or empty (the pod runner runs tasks itself)", () => {
    expect(taskContainersFrom({})).toBeNull();
    expect(taskContainersFrom({ PLAYBOOK_TASK_CONTAINERS: "" })).toBeNull();
  });
  it("parses the container → image object", () => {
    expect(taskContainersFrom({ PLAYBOOK_TASK_CONTAINERS: JSON.stringify(containers) })).toEqual(containers);
  });
  it.each(["not json", "[]", "{}", '{"task-1": 3}'])("refuses %s, naming the variable", (text) => {
    expect(() => taskContainersFrom({ PLAYBOOK_TASK_CONTAINERS: text })).toThrow(/PLAYBOOK_TASK_CONTAINERS/);
  });
});

describe("taskUidsFrom", () => {
  it("is null when unset (every agent is awaited before the first task, as in a local run)", () => {
    expect(taskUidsFrom({}, containers)).toBeNull();
  });
  it("parses each container's user", () => {
    const uids = { "task-1": 1000, "task-2": 1001 };
    expect(taskUidsFrom({ PLAYBOOK_TASK_UIDS: JSON.stringify(uids) }, containers)).toEqual(uids);
  });
  it.each([
    ["not JSON", "nope"],
    ["a container without a user", '{"task-1": 1000}'],
    ["a container the run does not have", '{"task-1": 1000, "task-2": 1001, "task-3": 1002}'],
    [
      "two containers under one user: the proof could not tell them apart",
      '{"task-1": 1000, "task-2": 1000}',
    ],
    ["root", '{"task-1": 0, "task-2": 1001}'],
  ])("refuses %s, naming the variable", (_why, text) => {
    expect(() => taskUidsFrom({ PLAYBOOK_TASK_UIDS: text }, containers)).toThrow(/PLAYBOOK_TASK_UIDS/);
  });
});
