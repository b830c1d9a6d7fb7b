// What the API server refuses at admission through the CRD's schema and CEL rules, with messages
// that name the field, and what `kubectl explain` tells about it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { clients, getPlaybook, kubectl, kubectlResult, playbookManifest } from "./support.js";

const { core } = clients();
let namespace: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-admission");
});
afterAll(() => deleteTestNamespace(core, namespace));

const apply = (name: string, spec: Record<string, unknown>) =>
  kubectlResult(["-n", namespace, "apply", "-f", "-"], stringify(playbookManifest(name, spec)));
// Client-side apply keeps a copy of the object in an annotation (256 KiB at most): large specs are created.
const create = (name: string, spec: Record<string, unknown>) =>
  kubectlResult(["-n", namespace, "create", "-f", "-"], stringify(playbookManifest(name, spec)));

const refusals = [
  {
    name: "a task timeout longer than the ceiling",
    spec: {
      ceiling: "30m",
      tasks: [
        { name: "build", run: "make", timeout: "10m" },
        { name: "test", run: "make test", timeout: "2h" },
        { name: "deploy", run: "make deploy", timeout: "3h" },
      ],
    },
    // The first task too long, by index and value, in the words of `playbook validate`.
    says: ["spec.tasks: Invalid value: spec.tasks[1].timeout: 2h is longer than spec.ceiling 30m"],
  },
  {
    name: "a malformed task timeout beside a ceiling",
    spec: { ceiling: "30m", tasks: [{ name: "a", run: "true", timeout: "90x" }] },
    // One cause, on the line of "is invalid:", as the API server writes a single one.
    says: [
      'is invalid: spec.tasks[0].timeout: Invalid value: "90x": spec.tasks[].timeout must be a duration such as 90s, 10m or 1h30m',
    ],
  },
  {
    name: "a malformed ceiling beside task timeouts and a start timeout",
    spec: { ceiling: "90x", startTimeout: "5m", tasks: [{ name: "a", run: "true", timeout: "2h" }] },
    says: [
      'is invalid: spec.ceiling: Invalid value: "90x": spec.ceiling must be a duration such as 90s, 30m or 1h30m',
    ],
  },
  {
    name: "a start timeout longer than the ceiling",
    spec: { ceiling: "30m", startTimeout: "1h", tasks: [{ name: "a", run: "true" }] },
    says: ["spec.startTimeout: Invalid value: spec.startTimeout: 1h is longer than spec.ceiling 30m"],
  },
  {
    name: "duplicate task names",
    spec: {
      tasks: [
        { name: "build", run: "a" },
        { name: "build", run: "b" },
      ],
    },
    says: ["spec.tasks[].name must be unique"],
  },
  {
    name: "a malformed ceiling",
    spec: { ceiling: "ten minutes", tasks: [{ name: "a", run: "true" }] },
    says: ['spec.ceiling: Invalid value: "ten minutes"', "must be a duration"],
  },
  {
    name: "a malformed task timeout",
    spec: { tasks: [{ name: "a", run: "true", timeout: "5x" }] },
    says: ['spec.tasks[0].timeout: Invalid value: "5x"'],
  },
  {
    name: "a negative stall",
    spec: { stall: "-1m", tasks: [{ name: "a", run: "true" }] },
    says: ['spec.stall: Invalid value: "-1m"'],
  },
  {
    name: "a zero ceiling",
    spec: { ceiling: "0s", tasks: [{ name: "a", run: "true" }] },
    says: ["spec.ceiling must be longer than 0s"],
  },
  {
    name: "a task name that is not a DNS-1123 label",
    spec: { tasks: [{ name: "Build_All", run: "true" }] },
    says: ["spec.tasks[0].name"],
  },
  {
    name: "no tasks",
    spec: { tasks: [] },
    says: ["spec.tasks"],
  },
  {
    name: "tasks too large for the plan to reach their pod",
    spec: {
      tasks: ["a", "b", "c", "d"].map((name) => ({ name, run: `: ${"x".repeat(65_530)}` })),
    },
    says: ["spec.tasks: Invalid value", "spec.tasks is too large to run", "at most 204800 characters"],
  },
  {
    name: "a finally timeout longer than the finally ceiling",
    spec: {
      finallyCeiling: "5m",
      tasks: [{ name: "build", run: "make" }],
      finally: [
        { name: "unlock", run: "unlock", timeout: "1m" },
        { name: "page", run: "page", timeout: "10m" },
      ],
    },
    says: ["spec.finally: Invalid value: spec.finally[1].timeout: 10m is longer than spec.finallyCeiling 5m"],
  },
  {
    name: "a finally task named as a main task",
    spec: { tasks: [{ name: "build", run: "make" }], finally: [{ name: "build", run: "make clean" }] },
    says: [
      'spec.finally[0].name: "build" is already used by a task of spec.tasks; task names must be unique across spec.tasks and spec.finally',
    ],
  },
  {
    name: "duplicate finally task names",
    spec: {
      tasks: [{ name: "build", run: "make" }],
      finally: [
        { name: "clean", run: "a" },
        { name: "clean", run: "b" },
      ],
    },
    says: ["spec.finally[].name must be unique"],
  },
  {
    name: "a zero finally ceiling",
    spec: {
      finallyCeiling: "0s",
      tasks: [{ name: "a", run: "true" }],
      finally: [{ name: "b", run: "true" }],
    },
    says: ["spec.finallyCeiling must be longer than 0s"],
  },
  {
    name: "a malformed finally ceiling",
    spec: { finallyCeiling: "5x", tasks: [{ name: "a", run: "true" }] },
    says: ['spec.finallyCeiling: Invalid value: "5x": spec.finallyCeiling must be a duration'],
  },
  {
    name: "21 finally tasks",
    spec: {
      tasks: [{ name: "a", run: "true" }],
      finally: Array.from({ length: 21 }, (_, i) => ({ name: `f${i}`, run: "true" })),
    },
    says: ["spec.finally: Too many: 21: must have at most 20 items"],
  },
  {
    name: "a reserved environment variable in a finally task",
    spec: {
      tasks: [{ name: "a", run: "true" }],
      finally: [{ name: "b", run: "true", env: [{ name: "PLAYBOOK_OUTCOME", value: "Succeeded" }] }],
    },
    says: ["spec.finally[0].env[0].name", "spec.finally[].env[].name must not start with PLAYBOOK_"],
  },
  {
    name: "tasks and finally tasks too large together for the plan to reach their pod",
    spec: {
      tasks: ["a", "b", "c"].map((name) => ({ name, run: `: ${"x".repeat(65_530)}` })),
      finally: [{ name: "d", run: `: ${"x".repeat(65_530)}` }],
    },
    says: ["spec.tasks: Invalid value", "spec.tasks is too large to run", "spec.finally's included"],
  },
  {
    name: "a ninth distinct image brought by a finally task",
    spec: {
      tasks: Array.from({ length: 8 }, (_, i) => ({ name: `t${i}`, run: "true", image: `i${i}:1` })),
      finally: [{ name: "clean", run: "true", image: "i8:1" }],
    },
    says: ["spec.finally's included) may use at most 8 distinct"],
  },
  {
    name: "a reserved environment variable",
    spec: { tasks: [{ name: "a", run: "true", env: [{ name: "PLAYBOOK_PLAN", value: "x" }] }] },
    says: ["must not start with PLAYBOOK_"],
  },
  {
    name: "a queue name that is no label value",
    spec: { queueName: "Team_A", tasks: [{ name: "a", run: "true" }] },
    says: ['spec.queueName: Invalid value: "Team_A"'],
  },
  {
    name: "a priority class name longer than a label value",
    spec: { priorityClassName: "p".repeat(64), tasks: [{ name: "a", run: "true" }] },
    says: ["spec.priorityClassName: Too long"],
  },
  {
    name: "a zero queue timeout",
    spec: { queueTimeout: "0s", tasks: [{ name: "a", run: "true" }] },
    says: ["spec.queueTimeout must be longer than 0s"],
  },
  {
    name: "a malformed queue timeout",
    spec: { queueTimeout: "soon", tasks: [{ name: "a", run: "true" }] },
    says: ['spec.queueTimeout: Invalid value: "soon": spec.queueTimeout must be a duration'],
  },
  {
    name: "an unknown onPreemption",
    spec: { onPreemption: "Retry", tasks: [{ name: "a", run: "true" }] },
    says: ['spec.onPreemption: Unsupported value: "Retry"', '"Requeue"', '"Fail"'],
  },
  {
    name: "a maxPreemptions above 100",
    spec: { maxPreemptions: 101, tasks: [{ name: "a", run: "true" }] },
    says: [
      "spec.maxPreemptions: Invalid value: 101: spec.maxPreemptions in body should be less than or equal to 100",
    ],
  },
];

describe("admission", () => {
  it.each(refusals)("refuses $name, naming the field", async ({ name, spec, says }) => {
    const result = await create(
      `bad-${name.replace(/[^a-z]+/g, "-").replace(/^-|-$/g, "")}`.slice(0, 60),
      spec,
    );
    expect(result.code).not.toBe(0);
    for (const text of says) expect(result.stderr).toContain(text);
    // CEL's own words never reach the user: every comparison sees only well-formed durations.
    expect(result.stderr).not.toContain("type conversion error");
  });

  it("refuses a policy whose default ceiling is above its maximum, naming both values", async () => {
    const policy = {
      apiVersion: "playbook.dev/v1alpha1",
      kind: "PlaybookPolicy",
      metadata: { name: "default" },
      spec: { defaults: { ceiling: "2h" }, maximums: { ceiling: "1h" } },
    };
    const result = await kubectlResult(["-n", namespace, "create", "-f", "-"], stringify(policy));
    expect(result.code).not.toBe(0);
    expect(result.stderr.trim()).toBe(
      'The PlaybookPolicy "default" is invalid: spec.defaults.ceiling: Invalid value: spec.defaults.ceiling: 2h is longer than spec.maximums.ceiling 1h',
    );
  });

  it("refuses a policy whose default queue timeout is above its maximum, naming both values", async () => {
    const policy = {
      apiVersion: "playbook.dev/v1alpha1",
      kind: "PlaybookPolicy",
      metadata: { name: "default" },
      spec: { defaults: { queueName: "team-a", queueTimeout: "2h" }, maximums: { queueTimeout: "1h" } },
    };
    const result = await kubectlResult(["-n", namespace, "create", "-f", "-"], stringify(policy));
    expect(result.code).not.toBe(0);
    expect(result.stderr.trim()).toBe(
      'The PlaybookPolicy "default" is invalid: spec.defaults.queueTimeout: Invalid value: spec.defaults.queueTimeout: 2h is longer than spec.maximums.queueTimeout 1h',
    );
  });

  it("refuses a policy whose default maxPreemptions is above its maximum, naming both values", async () => {
    const policy = {
      apiVersion: "playbook.dev/v1alpha1",
      kind: "PlaybookPolicy",
      metadata: { name: "default" },
      spec: { defaults: { maxPreemptions: 4 }, maximums: { maxPreemptions: 2 } },
    };
    const result = await kubectlResult(["-n", namespace, "create", "-f", "-"], stringify(policy));
    expect(result.code).not.toBe(0);
    expect(result.stderr.trim()).toBe(
      'The PlaybookPolicy "default" is invalid: spec.defaults.maxPreemptions: Invalid value: spec.defaults.maxPreemptions: 4 is more than spec.maximums.maxPreemptions 2',
    );
  });

  it("keeps a Playbook's Kueue fields and shows its queue timeout in status.limits", async () => {
    await apply("kueue-fields", {
      queueName: "team-a",
      priorityClassName: "high",
      queueTimeout: "45m",
      onPreemption: "Fail",
      maxPreemptions: 2,
      tasks: [{ name: "a", run: "true" }],
    });
    const limit = { value: "45m", source: "spec" };
    const maxPreemptions = { value: 2, source: "spec" };
    const queue = {
      name: "team-a",
      source: "spec",
      priorityClassName: "high",
      requests: {
        runner: { cpu: "50m", memory: "128Mi" },
        task: { cpu: { value: "100m", source: "default" }, memory: { value: "1Gi", source: "spec" } },
        taskContainers: 1,
      },
    };
    await kubectl([
      ...["-n", namespace, "patch", "pb", "kueue-fields", "--subresource=status", "--type=merge"],
      ...[
        "-p",
        JSON.stringify({
          status: {
            limits: { ceiling: limit, stall: limit, killGrace: limit, queueTimeout: limit, maxPreemptions },
            queue,
          },
        }),
      ],
    ]);
    const stored = await getPlaybook(namespace, "kueue-fields");
    expect(stored.spec).toMatchObject({
      queueName: "team-a",
      priorityClassName: "high",
      queueTimeout: "45m",
      onPreemption: "Fail",
      maxPreemptions: 2,
    });
    expect(stored.status?.limits?.queueTimeout).toEqual(limit);
    expect(stored.status?.limits?.maxPreemptions).toEqual(maxPreemptions);
    // Not pruned: the CRD's status schema holds what the controller shows of the queue.
    expect(stored.status?.queue).toEqual(queue);
  });

  it("refuses an image pattern whose * is not a path boundary, naming the index and the value", async () => {
    const policy = (name: string, allowedImages: string[]) => ({
      apiVersion: "playbook.dev/v1alpha1",
      kind: "PlaybookPolicy",
      metadata: { name },
      spec: { allowedImages },
    });
    const refused = await kubectlResult(
      ["-n", namespace, "create", "-f", "-"],
      stringify(policy("images-bad", ["registry.example/*", "ghcr.io/x/y:1", "registry.example.com*"])),
    );
    expect(refused.code).not.toBe(0);
    expect(refused.stderr.trim()).toBe(
      'The PlaybookPolicy "images-bad" is invalid: spec.allowedImages[2]: Invalid value: "registry.example.com*": must be an exact image or end in "/*"',
    );
    for (const bad of ["*", "registry.example/x:*", "registry.example/*/x"]) {
      const result = await kubectlResult(
        ["-n", namespace, "create", "-f", "-"],
        stringify(policy("images-bad", [bad])),
      );
      expect(result.code, bad).not.toBe(0);
      expect(result.stderr).toContain(
        `spec.allowedImages[0]: Invalid value: ${JSON.stringify(bad)}: must be an exact image or end in "/*"`,
      );
    }
    const accepted = await kubectlResult(
      ["-n", namespace, "create", "-f", "-"],
      stringify(policy("images-good", ["registry.example/*", "ghcr.io/x/y:1"])),
    );
    expect(accepted.stderr).toBe("");
    expect(accepted.code).toBe(0);
  });

  it("accepts a valid Playbook and fills in the schema's defaults", async () => {
    const result = await apply("fine", {
      ceiling: "30m",
      tasks: [{ name: "build", run: "make", timeout: "30m", env: [{ name: "K" }] }],
    });
    expect(result.stderr).toBe("");
    const stored = await getPlaybook(namespace, "fine");
    expect(stored.spec).toMatchObject({
      cancel: false,
      tasks: [{ name: "build", retries: 0, env: [{ name: "K", value: "" }] }],
    });
    expect(stored.spec.ceiling).toBe("30m");
    expect(stored.spec.stall).toBeUndefined();
    // Left unset, so that the namespace's PlaybookPolicy can give its default (else the controller's 2).
    expect(stored.spec.backoffLimit).toBeUndefined();
  });

  describe("once a run has started", () => {
    const started = async (name: string) => {
      await apply(name, { ceiling: "30m", tasks: [{ name: "build", run: "make" }] });
      // What the controller writes when it creates the run's first pod.
      await kubectl([
        ...["-n", namespace, "patch", "pb", name, "--subresource=status", "--type=merge"],
        ...["-p", JSON.stringify({ status: { phase: "Pending", startTime: new Date().toISOString() } })],
      ]);
    };
    const patch = (name: string, spec: Record<string, unknown>) =>
      kubectlResult([
        ...["-n", namespace, "patch", "pb", name, "--type=merge"],
        ...["-p", JSON.stringify({ spec })],
      ]);

    it.each([
      {
        field: "spec.tasks",
        spec: {
          tasks: [
            { name: "build", run: "make" },
            { name: "test", run: "make test" },
          ],
        },
      },
      { field: "spec.ceiling", spec: { ceiling: "2h" } },
      { field: "spec.stall", spec: { stall: "1m" } },
      { field: "spec.image", spec: { image: "busybox" } },
      { field: "spec.shell", spec: { shell: "bash -eo pipefail" } },
      { field: "spec.finally", spec: { finally: [{ name: "clean", run: "true" }] } },
      { field: "spec.finallyCeiling", spec: { finallyCeiling: "10m" } },
      { field: "spec.queueName", spec: { queueName: "team-b" } },
      { field: "spec.priorityClassName", spec: { priorityClassName: "high" } },
      { field: "spec.queueTimeout", spec: { queueTimeout: "1h" } },
      { field: "spec.onPreemption", spec: { onPreemption: "Fail" } },
      { field: "spec.maxPreemptions", spec: { maxPreemptions: 1 } },
    ])("refuses an edit of $field, naming the field", async ({ field, spec }) => {
      const name = `frozen-${field.replace("spec.", "").toLowerCase()}`;
      await started(name);
      const result = await patch(name, spec);
      expect(result.code).not.toBe(0);
      expect(result.stderr).toContain(`${field}: Forbidden: ${field} cannot change once the run has started`);
      expect((await getPlaybook(namespace, name)).spec.tasks).toEqual([
        { name: "build", run: "make", retries: 0 },
      ]);
    });

    it("still takes spec.cancel", async () => {
      await started("frozen-cancel");
      const result = await patch("frozen-cancel", { cancel: true });
      expect(result.stderr).toBe("");
      expect((await getPlaybook(namespace, "frozen-cancel")).spec.cancel).toBe(true);
    });

    it("takes edits before the run started", async () => {
      await apply("not-started", { tasks: [{ name: "build", run: "make" }] });
      const result = await patch("not-started", { ceiling: "1h" });
      expect(result.stderr).toBe("");
      expect((await getPlaybook(namespace, "not-started")).spec.ceiling).toBe("1h");
    });
  });

  it("explains every field", async () => {
    // kubectl wraps descriptions; compare words, not lines.
    const explain = async (field: string) => (await kubectl(["explain", field])).stdout.replace(/\s+/g, " ");
    expect(await explain("playbook.spec.tasks.timeout")).toContain("Must not be longer than spec.ceiling");
    expect(await explain("playbook.status.conditions.reason")).toContain("TaskTimeout");
    expect(await explain("pb.spec.cancel")).toContain("cancel the run");
    expect(await explain("pb.spec.tasks.shell")).toContain('WORDS -c RUN ("bash -eo pipefail", "sh -eu")');
    expect(await explain("playbook.spec.finally")).toContain("after the main tasks end, however they ended");
    expect(await explain("playbook.spec.finally.timeout")).toContain(
      "Must not be longer than the finally ceiling",
    );
    expect(await explain("playbook.spec.finallyCeiling")).toContain("is not taken from spec.ceiling");
    expect(await explain("playbook.status.finally.limit")).toContain("FinallyCeiling");
  });
});
