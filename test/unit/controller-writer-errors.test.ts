// How the writer takes an API server's refusal of a pod create: a refusal about the pod or the
// namespace (403, a missing service account) is shown on the run as Pending with the reason; the
// controller's own credentials refused (401) or the API server shedding load (429) is not.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { ControllerMetrics } from "../../src/controller/metrics.js";
import { parseStoredPlaybook } from "../../src/controller/objects.js";
import type { Decision } from "../../src/controller/playbook/reconcile.js";
import { PlaybookWriter } from "../../src/controller/playbook/writer.js";
import { PodCreateFailedError } from "../../src/controller/reconcile-errors.js";
import { statusCodeOf } from "../../src/runtime/api-errors.js";
import { systemClock } from "../../src/runtime/clock.js";
import { makeClients } from "../../src/runtime/kube-config.js";

let server: Server | undefined;
afterEach(async () => {
  const running = server;
  server = undefined;
  if (!running) return;
  running.closeAllConnections();
  await new Promise((resolve) => running.close(resolve));
});

/** An API server that refuses pod creates with `code` and records every request. */
async function refusingApi(code: number) {
  const requests: string[] = [];
  server = createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      requests.push(`${request.method} ${request.url}`);
      const refused = request.method === "POST" && request.url?.endsWith("/pods");
      response.writeHead(refused ? code : 200, { "content-type": "application/json" });
      response.end(
        JSON.stringify(
          refused
            ? { kind: "Status", status: "Failure", code, message: `refused with ${code}` }
            : { metadata: { resourceVersion: "2" } },
        ),
      );
    });
  });
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [
      {
        name: "c",
        server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        skipTLSVerify: true,
      },
    ],
    users: [{ name: "u", token: "t" }],
    contexts: [{ name: "c", cluster: "c", user: "u" }],
    currentContext: "c",
  });
  return { clients: makeClients(kubeConfig), requests };
}

const playbook = parseStoredPlaybook({
  apiVersion: "playbook.dev/v1alpha1",
  kind: "Playbook",
  metadata: { name: "nightly", namespace: "ops", uid: "u-1", resourceVersion: "1", generation: 1 },
  spec: { tasks: [{ name: "t", run: "true" }] },
});

const decision: Decision = {
  // The start record written with the first create (what the run shows if the create fails).
  status: { observedGeneration: 1, phase: "Pending", conditions: [] },
  actions: [
    {
      type: "createPod",
      attempt: 1,
      planDigest: `sha256:${"0".repeat(64)}`,
      pod: {
        apiVersion: "v1",
        kind: "Pod",
        metadata: {
          name: "nightly-1",
          namespace: "ops",
          labels: {},
          annotations: {},
          ownerReferences: [
            {
              apiVersion: "playbook.dev/v1alpha1",
              kind: "Playbook",
              name: "nightly",
              uid: "u-1",
              controller: true,
              blockOwnerDeletion: true,
            },
          ],
        },
        spec: {},
      },
    },
  ],
  events: [],
};

/** The writer applies the decision against an API server refusing the pod create with `code`. */
async function applyAgainst(code: number): Promise<{ error: unknown; requests: string[] }> {
  const { clients, requests } = await refusingApi(code);
  const writer = new PlaybookWriter({
    clients,
    log: pino({ level: "silent" }),
    clock: systemClock,
    metrics: new ControllerMetrics({ defaults: false }),
    identity: "test",
    metricsPlaybookLabel: "",
  });
  if (!playbook) throw new Error("the test Playbook did not parse");
  const error = await writer.apply(playbook, decision).catch((failure: unknown) => failure);
  clients.api.close();
  return { error, requests };
}

describe("a pod create the API server refuses", () => {
  it.each([
    { code: 401, what: "the controller's credentials refused" },
    { code: 429, what: "too many requests" },
  ])("with $code ($what) is retried as it is, with no Pending status on the run", async ({ code }) => {
    const { error, requests } = await applyAgainst(code);
    expect(error).not.toBeInstanceOf(PodCreateFailedError);
    expect(statusCodeOf(error)).toBe(code);
    expect(requests.filter((request) => request.startsWith("PUT"))).toEqual([]);
  });

  it("with 403 (refused by the namespace's admission) shows the run Pending with the reason, and is retried", async () => {
    const { error, requests } = await applyAgainst(403);
    expect(error).toBeInstanceOf(PodCreateFailedError);
    expect((error as Error).message).toBe("could not create pod nightly-1: 403 refused with 403");
    expect(requests.filter((request) => request.startsWith("PUT"))).toEqual([
      "PUT /apis/playbook.dev/v1alpha1/namespaces/ops/playbooks/nightly/status",
    ]);
  });
});
