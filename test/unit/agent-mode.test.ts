// Agent mode's small decisions: which container a task runs in, and $PLAYBOOK_TASK_CONTAINERS.
import { describe, expect, it } from "vitest";
import type { TaskSpec } from "../../src/api/playbook.js";
import { containerOfTask, taskContainersFrom } from "../../src/pod-runner/agent-mode.js";

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
