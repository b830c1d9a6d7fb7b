import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import {
  clients,
  condition,
  eventually,
  spawnControllerProcess,
  succeedFirstPod,
  waitForFinished,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { freePort } from "../harness/processes.js";
import { sample } from "../unit/metrics-text.js";

const { core, custom } = clients();
let namespace: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-options");
});
afterAll(() => deleteTestNamespace(core, namespace));

/** The controller as a process on this test's namespace, without leader election. */
function spawnController(port: number, extra: string[]) {
  return spawnControllerProcess([
    "--namespaces",
    namespace,
    "--metrics-address",
    `127.0.0.1:${port}`,
    "--no-leader-election",
    "--identity",
    "options-test",
    ...extra,
  ]);
}

/** Runs the controller until its workers started, then stops it; returns its stdout lines. */
async function startUpLines(format: "json" | "text"): Promise<string[]> {
  const controller = spawnController(await freePort(), ["--log-format", format]);
  try {
    await eventually("the workers to start", async () =>
      controller.stdout().includes("Started workers") ? true : undefined,
    );
    controller.child.kill("SIGTERM");
    expect(await controller.exited, controller.stderr()).toBe(0);
    return controller.stdout().split("\n").filter(Boolean);
  } finally {
    controller.child.kill("SIGKILL");
  }
}

describe("--log-format", () => {
  it("json prints one object per start-up line, for log collectors", async () => {
    const lines = await startUpLines("json");
    const records = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    // The two choices made from the nodes' list are said in the order their lists came.
    const chose = (start: string) => records.find((r) => String(r.msg).startsWith(start));
    expect(
      records.map((r) => (String(r.msg).startsWith("Chose ") ? "Chose ..." : r.msg)),
      lines.join("\n"),
    ).toEqual([
      "Serving metrics and health",
      "Chose ...",
      "Chose ...",
      "Caches synced",
      "Started workers",
      "Stopping: finishing in-flight reconciles and releasing the Lease",
      "Stopped",
    ]);
    expect(records[0]).toMatchObject({ level: 30, component: "playbook-controller" });
    const agent = chose("Chose how task containers get the agent");
    expect(agent).toMatchObject({ delivery: expect.stringMatching(/^(image-volume|post-start)$/) });
    expect(agent?.why).toMatch(/^auto: /);
    // The scripted node's runtime (scripted://) runs no pod in a user namespace of its own.
    expect(chose("Chose whether run pods get their own user namespace")).toMatchObject({
      userNamespaces: "off",
      why: expect.stringMatching(
        /^auto: (node \S+ runs scripted:\/\/ \(user namespaces need containerd 2\.0\+ or CRI-O 1\.25\+\)|no node has reported its container runtime yet)$/,
      ),
    });
    expect(records[3]).toMatchObject({ namespaces: [namespace] });
    expect(records[4]).toMatchObject({ workers: 2, identity: "options-test" });
  });

  it("text prints time, level, message and key=value fields, one line each", async () => {
    const lines = await startUpLines("text");
    const time = String.raw`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`;
    expect(lines).toHaveLength(7);
    expect(lines[0]).toMatch(
      new RegExp(`^${time} INFO  Serving metrics and health address=127\\.0\\.0\\.1:\\d+$`),
    );
    // The two choices made from the nodes' list, in the order their lists came.
    const chose = lines.slice(1, 3).sort();
    expect(chose[0]).toMatch(
      new RegExp(
        `^${time} INFO  Chose how task containers get the agent delivery=(image-volume|post-start) why=`,
      ),
    );
    expect(chose[1]).toMatch(
      new RegExp(
        `^${time} INFO  Chose whether run pods get their own user namespace userNamespaces=off why=`,
      ),
    );
    expect(lines[3]).toMatch(new RegExp(`^${time} INFO  Caches synced namespaces=\\["${namespace}"\\]$`));
    expect(lines[4]).toMatch(new RegExp(`^${time} INFO  Started workers workers=2 identity=options-test$`));
    expect(lines[5]).toMatch(
      new RegExp(
        `^${time} INFO  Stopping: finishing in-flight reconciles and releasing the Lease signal=SIGTERM$`,
      ),
    );
    expect(lines[6]).toMatch(new RegExp(`^${time} INFO  Stopped$`));
  });
});

describe("--metrics-playbook-label", () => {
  it("labels a run's metrics with its Playbook's label value, and reports the caches ready", async () => {
    const port = await freePort();
    const controller = spawnController(port, [
      "--metrics-playbook-label",
      "app.kubernetes.io/name",
      "--log-level",
      "warn",
    ]);
    try {
      const url = `http://127.0.0.1:${port}/metrics`;
      const scrape = async () => (await fetch(url).catch(() => undefined))?.text();
      await eventually("playbook_ready to be 1", async () => {
        const text = await scrape();
        return text && sample(text, "playbook_ready", {}) === 1 ? true : undefined;
      });
      await custom.createNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        plural: PLURAL,
        namespace,
        body: {
          apiVersion: `${GROUP}/${VERSION}`,
          kind: "Playbook",
          metadata: { name: "labelled", labels: { "app.kubernetes.io/name": "billing" } },
          spec: { ceiling: "1m", tasks: [{ name: "a", run: "true", timeout: "30s" }] },
        },
      });
      // Its one task took 1s of its 30s timeout.
      await succeedFirstPod(namespace, "labelled");
      const playbook = await waitForFinished(namespace, "labelled", 60_000);
      expect(condition(playbook, "Succeeded")?.reason).toBe("Succeeded");
      const labels = { namespace, playbook: "billing" };
      const text = await eventually("the run to be counted", async () => {
        const text = await scrape();
        return text && sample(text, "playbook_runs_total", { ...labels, reason: "Succeeded" }) === 1
          ? text
          : undefined;
      });
      expect(sample(text, "playbook_run_duration_seconds_count", { ...labels, reason: "Succeeded" })).toBe(1);
      // The scripted node's runtime runs no pod in a user namespace of its own.
      expect(sample(text, "playbook_user_namespaces", {})).toBe(0);
      // Without leader election the single replica reconciles, so it reports itself the leader.
      expect(sample(text, "playbook_leader", {})).toBe(1);
      expect(sample(text, "playbook_task_limit_usage_ratio_count", { ...labels, limit: "TaskTimeout" })).toBe(
        1,
      );
      expect(sample(text, "playbook_task_limit_usage_ratio_count", { ...labels, limit: "RunCeiling" })).toBe(
        1,
      );
      // A task that took 1s used less than 10% of its 30s timeout.
      expect(
        sample(text, "playbook_task_limit_usage_ratio_bucket", {
          ...labels,
          limit: "TaskTimeout",
          le: "0.1",
        }),
      ).toBe(1);
    } finally {
      controller.child.kill("SIGKILL");
    }
  });
});
