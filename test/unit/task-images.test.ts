// Task images as the schema, the CRD and the controller read them: an image reference checked by
// syntax and length naming the field, at most eight distinct images per Playbook (each is a
// container of the run's pod), and each task's container resolved in first-use order.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { InvalidPlaybookError, parsePlaybookManifest } from "../../src/api/manifest.js";
import { PlaybookPolicySchema } from "../../src/api/policy.js";
import { decodeReport, encodeReport } from "../../src/api/report.js";
import { expandReport } from "../../src/api/report-expand.js";
import {
  IMAGE_REFERENCE_PATTERN,
  isImageReference,
  MAX_IMAGE_LENGTH,
  MAX_TASK_IMAGES,
  resolveTaskContainers,
  taskContainersEnv,
} from "../../src/api/task-images.js";
import { decide } from "../../src/controller/playbook/reconcile.js";
import { playbook, SETTINGS, T0 } from "./controller-fixtures.js";

const header = "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata:\n  name: demo\n";

const manifest = (spec: Record<string, unknown>) => `${header}spec: ${JSON.stringify(spec)}\n`;

function problems(spec: Record<string, unknown>): string[] {
  try {
    parsePlaybookManifest(manifest(spec), LOCAL_DEFAULTS, "demo.yaml");
  } catch (error) {
    if (error instanceof InvalidPlaybookError) return error.problems.map((p) => `${p.path}: ${p.message}`);
    throw error;
  }
  return [];
}

describe("an image reference", () => {
  it.each([
    "postgres:16",
    "amazon/aws-cli:2",
    "registry.example/team/tools:3",
    "registry.example:5000/a/b_c__d-e.f:v1.2-rc_3",
    "localhost/playbook.test/debian:1",
    `alpine@sha256:${"a".repeat(64)}`,
    `ghcr.io/org/app:1@sha256:${"0".repeat(64)}`,
    "playbook.test/static:1",
  ])("takes %s", (image) => {
    expect(isImageReference(image)).toBe(true);
  });

  it.each([
    ["an upper-case path", "Postgres:16"],
    ["a space", "postgres 16"],
    ["an empty tag", "postgres:"],
    ["a scheme", "https://registry.example/a:1"],
    ["a leading slash", "/postgres"],
    ["a double slash", "a//b"],
    ["a short digest", "alpine@sha256:abc"],
    ["a tag of 129 characters", `alpine:${"t".repeat(129)}`],
    ["more than the maximum length", `${"a/".repeat(256)}b`],
  ])("refuses %s", (_why, image) => {
    expect(isImageReference(image)).toBe(false);
  });

  it("is refused by the schema naming the field and the value", () => {
    expect(
      problems({
        tasks: [
          { name: "a", run: "true" },
          { name: "b", run: "true" },
          { name: "c", run: "true", image: "Postgres:16" },
        ],
      }),
    ).toEqual([
      'spec.tasks[2].image: "Postgres:16" must be an image reference such as postgres:16, registry.example/team/tools:3 or name@sha256:<digest> (lower-case path, optional tag and digest)',
    ]);
    expect(
      problems({ image: `${"a".repeat(MAX_IMAGE_LENGTH)}b`, tasks: [{ name: "a", run: "true" }] }),
    ).toEqual([`spec.image: "${"a".repeat(56)}... must be at most 512 characters`]);
  });

  it("is the CRD's pattern and length for spec.image, tasks[].image and a policy's default image", () => {
    type Schema = { properties: Record<string, Schema>; items: Schema; pattern?: string; maxLength?: number };
    const crd = (file: string) =>
      (
        parse(readFileSync(`crds/${file}`, "utf8")) as {
          spec: { versions: { schema: { openAPIV3Schema: Schema } }[] };
        }
      ).spec.versions[0]?.schema.openAPIV3Schema.properties.spec as Schema;
    const playbook = crd("playbook.dev_playbooks.yaml");
    const policy = crd("playbook.dev_playbookpolicies.yaml");
    for (const field of [
      playbook.properties.image,
      playbook.properties.tasks?.items.properties.image,
      policy.properties.defaults?.properties.image,
    ]) {
      expect(field).toMatchObject({ pattern: IMAGE_REFERENCE_PATTERN, maxLength: MAX_IMAGE_LENGTH });
    }
    expect(
      PlaybookPolicySchema.safeParse({
        apiVersion: "playbook.dev/v1alpha1",
        kind: "PlaybookPolicy",
        metadata: { name: "default" },
        spec: { defaults: { image: "Tools" } },
      }).success,
    ).toBe(false);
  });
});

describe("the images of a Playbook's tasks", () => {
  const tasks = (images: (string | undefined)[]) =>
    images.map((image, i) => ({ name: `t${i}`, run: "true", ...(image ? { image } : {}) }));

  it(`are at most ${MAX_TASK_IMAGES}: the task that brings a ninth is named, with every image and why`, () => {
    const nine = tasks(["i1:1", "i2:1", "i1:1", "i3:1", "i4:1", "i5:1", "i6:1", "i7:1", "i8:1", "i9:1"]);
    expect(problems({ tasks: nine })).toEqual([
      "spec.tasks[9].image: the tasks use 9 distinct images (i1:1, i2:1, i3:1, i4:1, i5:1, i6:1, i7:1, i8:1, i9:1); a Playbook's tasks may use at most 8, because each image is a container of the run's pod",
    ]);
    expect(problems({ tasks: nine.slice(0, 9) })).toEqual([]);
  });

  it("count the default image for tasks that name none: spec.image, else the default the controller fills in", () => {
    const eight = ["i1:1", "i2:1", "i3:1", "i4:1", "i5:1", "i6:1", "i7:1", "i8:1"];
    expect(problems({ tasks: tasks([...eight, undefined]) })).toEqual([
      "spec.tasks[8]: the tasks use 9 distinct images (i1:1, i2:1, i3:1, i4:1, i5:1, i6:1, i7:1, i8:1, the default image); a Playbook's tasks may use at most 8, because each image is a container of the run's pod",
    ]);
    // spec.image one of the eight: still eight.
    expect(problems({ image: "i1:1", tasks: tasks([...eight, undefined]) })).toEqual([]);
  });

  it("resolve to one container per distinct image, in first-use order, the default for tasks that name none", () => {
    const resolved = resolveTaskContainers(
      [{ image: "postgres:16" }, {}, { image: "amazon/aws-cli:2" }, { image: "postgres:16" }, {}],
      "registry.example/tools:3",
    );
    expect(resolved.containers).toEqual([
      { name: "task-1", image: "postgres:16" },
      { name: "task-2", image: "registry.example/tools:3" },
      { name: "task-3", image: "amazon/aws-cli:2" },
    ]);
    expect(resolved.tasks.map((t) => t.container)).toEqual([
      "task-1",
      "task-2",
      "task-3",
      "task-1",
      "task-2",
    ]);
    expect(JSON.parse(taskContainersEnv(resolved.containers))).toEqual({
      "task-1": "postgres:16",
      "task-2": "registry.example/tools:3",
      "task-3": "amazon/aws-cli:2",
    });
  });
});

describe("a task whose container ended under it", () => {
  const start = new Date("2026-01-01T00:00:00Z");
  const text = encodeReport({
    phase: "Failed",
    reason: "TaskFailed",
    startTime: start,
    completionTime: new Date(start.getTime() + 5000),
    containment: "agents",
    tasks: [
      {
        name: "dump",
        phase: "Failed",
        attempts: 1,
        exitCode: null,
        signal: "SIGKILL",
        lostContainer: "task-1",
      },
    ],
  });

  it("is reported with k, the container's name, and read back", () => {
    expect(JSON.parse(text).tasks[0]).toMatchObject({ p: "Failed", k: "task-1" });
    expect(decodeReport(text, 1).ct).toBe("agents");
  });

  it("is described by what the reader knows of the container, in the task's message and the condition", () => {
    const spec = parsePlaybookManifest(
      manifest({ tasks: [{ name: "dump", run: "pg_dump", image: "postgres:16" }] }),
      LOCAL_DEFAULTS,
    ).spec;
    const expanded = expandReport(decodeReport(text, 1), resolveLimits(spec, LOCAL_DEFAULTS), {
      images: ["postgres:16"],
      describeContainer: (name) => `container ${name} (image postgres:16) was OOMKilled (exit 137)`,
    });
    expect(expanded.tasks[0]).toMatchObject({
      image: "postgres:16",
      message: "container task-1 (image postgres:16) was OOMKilled (exit 137)",
    });
    expect(expanded.message).toBe(
      "task dump failed: container task-1 (image postgres:16) was OOMKilled (exit 137)",
    );
  });

  it("is only a failed task: a report saying otherwise contradicts itself", () => {
    const report = JSON.parse(text);
    report.tasks[0].p = "Cancelled";
    report.phase = "Cancelled";
    report.reason = "Cancelled";
    expect(() => decodeReport(JSON.stringify(report), 1)).toThrow(
      /names lost container task-1 but is Cancelled/,
    );
  });
});

describe("a Playbook stored with more task images than a pod holds (before the CRD's rule)", () => {
  it("ends InvalidSpec before any pod exists, naming the images and why", () => {
    const spec = {
      tasks: Array.from({ length: 9 }, (_, i) => ({ name: `t${i}`, run: "true", image: `i${i}:1` })),
    };
    const decision = decide({
      playbook: playbook(spec),
      pods: [],
      now: T0,
      settings: { ...SETTINGS, allowedImages: spec.tasks.map((t) => t.image) },
    });
    expect(decision.actions).toEqual([]);
    expect(decision.status?.conditions?.find((c) => c.type === "Succeeded")).toMatchObject({
      status: "False",
      reason: "InvalidSpec",
      message:
        "spec.tasks[8].image: the tasks use 9 distinct images (i0:1, i1:1, i2:1, i3:1, i4:1, i5:1, i6:1, i7:1, i8:1); a Playbook's tasks may use at most 8, because each image is a container of the run's pod",
    });
  });
});
