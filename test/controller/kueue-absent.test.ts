// The controller started with --kueue on a cluster without Kueue: it goes on (ready, the run's pod
// created with its queue label), says once why it cannot read Workloads, and asks the API server
// no more than once a minute.
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PlaybookController } from "../../src/controller/controller.js";
import { makeClients } from "../../src/runtime/kube-config.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { clients, createPlaybook, eventually, podsOf, testControllerConfig } from "./support.js";

const { core, kubeConfig } = clients();
let namespace = "";
let controller: PlaybookController | undefined;
let done: Promise<void> | undefined;
const lines: { level: number; msg: string; reason?: string }[] = [];

beforeAll(async () => {
  namespace = await createTestNamespace(core, "kueue-absent");
  const log = pino({ level: "info" }, { write: (line: string) => lines.push(JSON.parse(line)) });
  controller = new PlaybookController({
    config: testControllerConfig([namespace], { kueue: true }),
    clients: makeClients(kubeConfig),
    log,
  });
  done = controller.run();
  done.catch(() => {});
});
afterAll(async () => {
  controller?.stop();
  await done?.catch(() => {});
  if (namespace) await deleteTestNamespace(core, namespace);
});

describe("--kueue on a cluster without Kueue", () => {
  it("keeps working, ready, and says once that Workloads are not served", async () => {
    await eventually("the controller to be ready", async () => (controller?.ready ? true : undefined));
    await createPlaybook(namespace, "queued", {
      queueName: "team-a",
      tasks: [{ name: "hello", run: "echo hello" }],
    });
    const pod = await eventually("the run's pod", async () => (await podsOf(namespace, "queued"))[0]);
    expect(pod.metadata?.labels?.["kueue.x-k8s.io/queue-name"]).toBe("team-a");
    const said = lines.filter((line) => line.msg.includes("cannot read Kueue's Workloads"));
    expect(said).toHaveLength(1);
    expect(said[0]?.level).toBe(40);
    expect(said[0]?.reason).toBe(
      "workloads.kueue.x-k8s.io/v1beta2 is not served (Kueue is not installed, or too old to serve v1beta2)",
    );
    expect(lines.filter((line) => line.msg === "List failed" || line.msg === "Watch failed")).toEqual([]);
    expect(controller?.readiness()).toEqual({ ready: true, reason: "ok" });
  });
});
