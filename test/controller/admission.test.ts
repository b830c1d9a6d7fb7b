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

const refusals = [
  {
    name: "a task timeout longer than the ceiling",
    spec: { ceiling: "30m", tasks: [{ name: "build", run: "make", timeout: "2h" }] },
    says: ["spec.tasks[].timeout must not be longer than spec.ceiling 30m"],
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
    name: "a reserved environment variable",
    spec: { tasks: [{ name: "a", run: "true", env: [{ name: "PLAYBOOK_PLAN", value: "x" }] }] },
    says: ["must not start with PLAYBOOK_"],
  },
];

describe("admission", () => {
  it.each(refusals)("refuses $name, naming the field", async ({ name, spec, says }) => {
    const result = await apply(
      `bad-${name.replace(/[^a-z]+/g, "-").replace(/^-|-$/g, "")}`.slice(0, 60),
      spec,
    );
    expect(result.code).not.toBe(0);
    for (const text of says) expect(result.stderr).toContain(text);
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
      backoffLimit: 2,
      tasks: [{ name: "build", retries: 0, env: [{ name: "K", value: "" }] }],
    });
    expect(stored.spec.ceiling).toBe("30m");
    expect(stored.spec.stall).toBeUndefined();
  });

  it("explains every field", async () => {
    // kubectl wraps descriptions; compare words, not lines.
    const explain = async (field: string) => (await kubectl(["explain", field])).stdout.replace(/\s+/g, " ");
    expect(await explain("playbook.spec.tasks.timeout")).toContain("Must not be longer than spec.ceiling");
    expect(await explain("playbook.status.conditions.reason")).toContain("TaskTimeout");
    expect(await explain("pb.spec.cancel")).toContain("cancel the run");
  });
});
