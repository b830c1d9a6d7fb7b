// API calls against a server that accepts the connection and never answers, as a dead path or a
// frozen API server does.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";
import { afterEach, describe, expect, it } from "vitest";
import { abortedBy, makeClients } from "../../src/controller/kube.js";

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  server = undefined;
});

async function silentApi(): Promise<KubeConfig> {
  server = createServer(() => {
    // Never answers.
  });
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [{ name: "silent", server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: "silent" }],
    contexts: [{ name: "silent", cluster: "silent", user: "silent" }],
    currentContext: "silent",
  });
  return kubeConfig;
}

describe("an API call to a server that never answers", () => {
  it("fails at the clients' deadline instead of waiting forever", async () => {
    const { core } = makeClients(await silentApi(), 300);
    const started = performance.now();
    await expect(core.readNamespacedPod({ name: "p", namespace: "ops" })).rejects.toThrow(/timeout|abort/i);
    expect(performance.now() - started).toBeLessThan(5000);
  });

  it("fails as soon as its own signal aborts, before the clients' deadline", async () => {
    const { coordination } = makeClients(await silentApi(), 60_000);
    const started = performance.now();
    await expect(
      coordination.readNamespacedLease({ name: "l", namespace: "ops" }, abortedBy(AbortSignal.timeout(200))),
    ).rejects.toThrow(/timeout|abort/i);
    expect(performance.now() - started).toBeLessThan(5000);
  });
});
