// Events repeated by later passes (issue 18 item 8): a pod the API server keeps refusing is
// retried pass after pass, each saying FailedCreate with the same words. kubectl describe must
// show that as one event with its count, as the Kubernetes controllers' events do, not a pile.
import { afterAll, describe, expect, it } from "vitest";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
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

const { core } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];

afterAll(async () => {
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
