import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  clients,
  condition,
  createPlaybook,
  podsOf,
  type RunningController,
  startController,
  waitForFinished,
} from "./support.js";

const { core } = clients();
let namespace: string;
let controller: RunningController;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-smoke");
  controller = startController([namespace]);
});
afterAll(async () => {
  await controller?.stop();
  await deleteTestNamespace(core, namespace);
});

describe("smoke", () => {
  it("runs a playbook", async () => {
    await createPlaybook(namespace, "hello", { ceiling: "1m", tasks: [{ name: "a", run: "echo hi" }] });
    const pb = await waitForFinished(namespace, "hello", 60_000);
    console.log(JSON.stringify(pb.status, null, 1));
    console.log(
      JSON.stringify(
        (await podsOf(namespace, "hello")).map((p) => p.status),
        null,
        1,
      ),
    );
    expect(condition(pb, "Succeeded")?.reason).toBe("Succeeded");
  });
});
