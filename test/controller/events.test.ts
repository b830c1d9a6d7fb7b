// Events repeated by later passes (issue 18 item 8): a pod the API server keeps refusing is
// retried pass after pass, each saying FailedCreate with the same words. kubectl describe must
// show that as one event with its count, as the Kubernetes controllers' events do, not a pile.
import { pino } from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { EventRecorder, eventApiOf } from "../../src/runtime/events.js";
import { makeClients } from "../../src/runtime/kube-config.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { type FreezableProxy, startFreezableProxy } from "./freezable-proxy.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  kubectl,
  type RunningController,
  startController,
  waitForFinished,
} from "./support.js";

const { core, kubeConfig } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];
const proxies: FreezableProxy[] = [];

afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
  await Promise.all(controllers.map((c) => c.stop()));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
});

describe("an event that every retry of a pass records again", () => {
  it("is one Event whose count and lastTimestamp grow, not one Event per pass", async () => {
    const ns = await createTestNamespace(core, "pb-events");
    namespaces.push(ns);
    // Allowed, so that the API server (not the controller's allowlist) refuses the pod each time.
    controllers.push(startController([ns], { allowedServiceAccounts: "missing" }));
    const created = await createPlaybook(ns, "refused", {
      ceiling: "12s",
      serviceAccountName: "missing",
      tasks: [{ name: "a", run: "true" }],
    });
    const playbook = await waitForFinished(ns, "refused", 60_000);
    expect(condition(playbook, "Succeeded")?.reason).toBe("RunCeiling");
    // Events are written in the order they were recorded: once the run's last one is there,
    // every FailedCreate before it is too.
    const events = (await eventsOf(ns, "refused", ["RunFailed"])).filter(
      (e) => e.reason === "FailedCreate" && e.involvedObject.uid === created.metadata.uid,
    );
    expect(events).toHaveLength(1);
    const [event] = events;
    expect(event?.message).toMatch(
      /could not create pod refused-1: 403 .*serviceaccount "missing" not found/,
    );
    // The pass was retried with backoff over the 12s: several times, each counted here.
    expect(event?.count).toBeGreaterThanOrEqual(3);
    expect(Date.parse(String(event?.lastTimestamp))).toBeGreaterThan(
      Date.parse(String(event?.firstTimestamp)),
    );
    // What a user sees: one line, "(xN over ...)".
    const described = (await kubectl(["-n", ns, "describe", "pb", "refused"])).stdout;
    expect(described.match(/FailedCreate/g)).toHaveLength(1);
    expect(described).toMatch(new RegExp(`FailedCreate\\s+\\S+ \\(x${event?.count} over`));
  });
});

describe("an API server that stops answering", () => {
  it("holds at most maxQueued events for it, repeats merged, the rest dropped and logged", async () => {
    const ns = await createTestNamespace(core, "pb-events-slow");
    namespaces.push(ns);
    const created = await createPlaybook(ns, "busy", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    const target = { namespace: ns, name: "busy", uid: created.metadata.uid };
    const proxy = await startFreezableProxy(kubeConfig);
    proxies.push(proxy);
    const lines: { msg: string; dropped?: number }[] = [];
    const log = pino({ level: "info" }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const recorder = new EventRecorder(eventApiOf(makeClients(proxy.kubeConfig).api), "test", log, {
      maxQueued: 5,
    });
    proxy.freeze();
    // The first is taken to be written and hangs; a repeated one waits once, with its count.
    recorder.post(target, { type: "Normal", reason: "First", message: "hangs" }, new Date());
    for (let i = 0; i < 10; i++)
      recorder.post(target, { type: "Warning", reason: "Repeated", message: "the same words" }, new Date());
    for (let i = 0; i < 20; i++)
      recorder.post(target, { type: "Normal", reason: "Distinct", message: `event ${i}` }, new Date());
    expect(recorder.queuedCount).toBe(5);
    expect(recorder.dropped).toBe(16);
    expect(lines.filter((l) => l.msg.startsWith("Dropped events"))).toHaveLength(1);

    // The frozen connection is cut; the queue drains on a new one (the one in flight at the freeze
    // may or may not have reached the API server: it is not counted here).
    await proxy.restore();
    await recorder.flush();
    const events = (
      await core.listNamespacedEvent({
        namespace: ns,
        fieldSelector: `involvedObject.uid=${created.metadata.uid}`,
      })
    ).items.filter((e) => e.reportingInstance === "test" && e.reason !== "First");
    expect(events.map((e) => [e.reason, e.count]).sort()).toEqual(
      [
        ["Repeated", 10],
        ["Distinct", 1],
        ["Distinct", 1],
        ["Distinct", 1],
        ["Distinct", 1],
      ].sort(),
    );
    expect(
      events
        .filter((e) => e.reason === "Distinct")
        .map((e) => e.message)
        .sort(),
    ).toEqual(["event 0", "event 1", "event 2", "event 3"]);
  });
});
