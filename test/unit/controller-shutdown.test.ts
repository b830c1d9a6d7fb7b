import { KubeConfig } from "@kubernetes/client-node";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { loadControllerConfig } from "../../src/controller/config.js";
import { PlaybookController } from "../../src/controller/controller.js";
import { makeClients } from "../../src/runtime/kube-config.js";

describe("a controller whose API server is unreachable", () => {
  it("is not ready, and still stops promptly on SIGTERM", async () => {
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromOptions({
      clusters: [{ name: "gone", server: "http://127.0.0.1:9", skipTLSVerify: true }],
      users: [{ name: "gone" }],
      contexts: [{ name: "gone", cluster: "gone", user: "gone" }],
      currentContext: "gone",
    });
    const config = loadControllerConfig({ metricsAddress: "127.0.0.1:0", leaderElection: "false" }, {});
    const controller = new PlaybookController({
      config,
      clients: makeClients(kubeConfig),
      log: pino({ level: "silent" }),
    });
    const done = controller.run();
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(controller.ready).toBe(false);
    const started = Date.now();
    controller.stop();
    await done;
    expect(Date.now() - started).toBeLessThan(5000);
  });
});
