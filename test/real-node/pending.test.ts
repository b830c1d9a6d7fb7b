// A run whose pod cannot start says why within seconds on the real kubelet (issue 17 item 6): the
// tasks' image (spec.image: the runner's own container starts, the task container cannot) is one
// no registry serves (port 9 on the node's own loopback, where nothing listens, so
// containerd's pull fails at once and nothing leaves this machine), allowed by the namespace's
// PlaybookPolicy. The Playbook's pending message names the kubelet's waiting reason
// (ErrImagePull, then ImagePullBackOff) long before the start timeout, which then ends the run
// StartTimeout with that reason; and `kubectl get pb` shows Pending from its first row.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  kubectl,
  kubectlResult,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";

const IMAGE = "127.0.0.1:9/nothing/here:1";
// What the kubelet said, as the controller quotes it: the container and its image, the waiting
// reason, then its message, which names the image.
const PULL_FAILED = String.raw`container task-1 \(image 127\.0\.0\.1:9/nothing/here:1\): (ErrImagePull|ImagePullBackOff): [^\n]*127\.0\.0\.1:9/nothing/here:1`;

const { core } = clients();
let namespace = "";
let controller: RunningController | undefined;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "rn-pending");
  const policy = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "PlaybookPolicy",
    metadata: { name: "default", namespace },
    spec: { allowedImages: [IMAGE] },
  };
  const applied = await kubectlResult(["apply", "--server-side", "-f", "-"], JSON.stringify(policy));
  expect(applied.stderr).toBe("");
});
afterAll(async () => {
  await controller?.stop();
  if (namespace) await deleteTestNamespace(core, namespace);
});

describe("a Playbook whose image cannot be pulled, on the real node", () => {
  it("shows PHASE and REASON Pending in its first `kubectl get pb` row, before any controller wrote", async () => {
    // No controller runs yet: what kubectl shows is the CRD's status default.
    await createPlaybook(namespace, "unpullable", {
      image: IMAGE,
      ceiling: "1m",
      startTimeout: "20s",
      tasks: [{ name: "never", run: "echo never" }],
    });
    const { stdout } = await kubectl(["-n", namespace, "get", "pb", "unpullable"]);
    expect(stdout).toMatch(/^NAME\s+PHASE\s+REASON\s+TASK\s+CURRENT\s+AGE\n/);
    expect(stdout).toMatch(/\nunpullable\s+Pending\s+Pending\s+\S+\n$/);
  });

  it("names the kubelet's waiting reason in its pending message within 15 s", async () => {
    controller = startController([namespace], realNode.controller);
    const started = Date.now();
    const pendingMessage = new RegExp(String.raw`^pod unpullable-1 is pending \(attempt 1\): ${PULL_FAILED}`);
    const pending = await waitForPlaybook(
      namespace,
      "unpullable",
      "to say why its pod is pending",
      (playbook) => pendingMessage.test(condition(playbook, "Succeeded")?.message ?? ""),
      15_000,
    );
    process.stderr.write(
      `[pending] ${((Date.now() - started) / 1000).toFixed(1)} s after the controller started: ${condition(pending, "Succeeded")?.message}\n`,
    );
    expect(condition(pending, "Succeeded")).toMatchObject({ status: "Unknown", reason: "Pending" });
    expect(pending.status?.phase).toBe("Pending");
  });

  it("ends StartTimeout once its 20s start timeout passed, with the kubelet's reason in the message", async () => {
    const ended = await waitForFinished(namespace, "unpullable", 60_000);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "False", reason: "StartTimeout" });
    const message = condition(ended, "Succeeded")?.message ?? "";
    process.stderr.write(`[pending] ended: ${message}\n`);
    expect(message).toMatch(
      new RegExp(
        String.raw`^pod unpullable-1 \(attempt 1\) never started: its containers did not all start within the 20s start timeout \(spec\.startTimeout\); ${PULL_FAILED}`,
      ),
    );
    const { stdout } = await kubectl(["-n", namespace, "get", "pb", "unpullable"]);
    expect(stdout).toMatch(/\nunpullable\s+Failed\s+StartTimeout\s/);
  });
});

// Issue 34 item 2: the controller's runner image is one the node does not have (a tag no one
// built: the pull from `localhost` fails), and the run's ceiling is shorter than its start
// timeout. The run ends StartTimeout when the ceiling passes, naming the image and the kubelet's
// reason, never RunCeiling ("passed before pod started").
describe("a run whose runner image the node cannot pull, with a ceiling shorter than its start timeout", () => {
  const RUNNER = `localhost/playbook-controller:absent-${process.pid}`;
  let other = "";
  let missing: RunningController | undefined;
  afterAll(async () => {
    await missing?.stop();
    if (other) await deleteTestNamespace(core, other);
  });

  it("ends StartTimeout when the ceiling passes, naming the image and the kubelet's reason", async () => {
    other = await createTestNamespace(core, "rn-no-runner");
    missing = startController([other], { ...realNode.controller, runnerImage: RUNNER });
    const started = Date.now();
    await createPlaybook(other, "no-runner", {
      ceiling: "15s",
      killGrace: "1s",
      tasks: [{ name: "never", run: "echo never" }],
    });
    const ended = await waitForFinished(other, "no-runner", 90_000);
    const message = condition(ended, "Succeeded")?.message ?? "";
    process.stderr.write(
      `[pending] ended after ${((Date.now() - started) / 1000).toFixed(1)} s: ${message}\n`,
    );
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "False", reason: "StartTimeout" });
    expect(condition(ended, "LimitExceeded")).toMatchObject({ status: "True", reason: "StartTimeout" });
    const image = RUNNER.replace(/[/.]/g, "\\$&");
    expect(message).toMatch(
      new RegExp(
        String.raw`^pod no-runner-1 \(attempt 1\) never started: its containers did not all start before the run's 15s ceiling \(spec\.ceiling\) passed, sooner than its 5m start timeout \(the default start timeout\); container (runner|task-1) \(image ${image}\): (ErrImagePull|ImagePullBackOff): [^\n]*${image}`,
      ),
    );
    // The ceiling, not the 5m start timeout, bounded it.
    expect(
      Date.parse(ended.status?.completionTime ?? "") - Date.parse(ended.status?.startTime ?? ""),
    ).toBeLessThan(60_000);
  });
});
