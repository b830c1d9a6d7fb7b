// What the controller's caches keep of an object: not managedFields nor kubectl's last-applied
// copy, which it never reads and which make up much of a small object's bytes (issue 11).
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { parse } from "yaml";
import {
  type PodView,
  parsePod,
  parseStoredPlaybook,
  type StoredPlaybook,
  withoutUnreadFields,
} from "../../src/controller/objects.js";
import { ApiClient } from "../../src/runtime/api-client.js";
import { Informer } from "../../src/runtime/informer.js";

const ROOT = join(import.meta.dirname, "../..");

const managedFields = [
  {
    manager: "kubectl-client-side-apply",
    operation: "Update",
    fieldsType: "FieldsV1",
    fieldsV1: { "f:spec": {} },
  },
  {
    manager: "playbook-controller",
    operation: "Update",
    subresource: "status",
    fieldsV1: { "f:status": {} },
  },
];

function playbook(name: string, rv: string, annotations: Record<string, string>) {
  return {
    apiVersion: "playbook.dev/v1alpha1",
    kind: "Playbook",
    metadata: { name, namespace: "ops", resourceVersion: rv, generation: 1, managedFields, annotations },
    spec: { tasks: [{ name: "build", run: "make" }] },
    status: { phase: "Succeeded" },
  };
}

let servers: Server[] = [];
afterEach(async () => {
  for (const server of servers) await new Promise((resolve) => server.close(resolve));
  servers = [];
});

/** A watch endpoint that sends one MODIFIED event and stays open. */
async function watchServer(event: unknown): Promise<KubeConfig> {
  const server = createServer((_request, response) => {
    response.writeHead(200, { "content-type": "application/json" });
    response.write(`${JSON.stringify(event)}\n`);
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [
      {
        name: "fake",
        server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        skipTLSVerify: true,
      },
    ],
    users: [{ name: "fake" }],
    contexts: [{ name: "fake", cluster: "fake", user: "fake" }],
    currentContext: "fake",
  });
  return kubeConfig;
}

describe("the controller's cache", () => {
  it("keeps neither managedFields nor the last-applied copy of a listed or watched Playbook", async () => {
    const applied = {
      "kubectl.kubernetes.io/last-applied-configuration": '{"kind":"Playbook"}',
      team: "ops",
    };
    const kubeConfig = await watchServer({ type: "MODIFIED", object: playbook("watched", "3", applied) });
    const informer = new Informer<StoredPlaybook>({
      resource: "playbooks",
      api: new ApiClient(kubeConfig),
      watchPath: "/apis/playbook.dev/v1alpha1/playbooks",
      list: async () => ({ items: [playbook("listed", "1", applied)], resourceVersion: "2" }),
      parse: parseStoredPlaybook,
      transform: withoutUnreadFields,
      keyOf: (p) => `${p.metadata.namespace}/${p.metadata.name}`,
      resourceVersionOf: (p) => p.metadata.resourceVersion,
      watchTimeoutMs: 60_000,
      resyncMs: 0,
      log: pino({ level: "silent" }),
    });
    const watched = new Promise<void>((resolve) =>
      informer.addHandlers({ onUpsert: (p) => p.metadata.name === "watched" && resolve() }),
    );
    informer.start();
    await watched;
    await informer.stop();
    for (const name of ["listed", "watched"]) {
      const cached = informer.get(`ops/${name}`);
      expect(cached?.metadata).not.toHaveProperty("managedFields");
      expect(cached?.metadata.annotations).toEqual({ team: "ops" });
      // What the controller reads is all there.
      expect(cached?.metadata.generation).toBe(1);
      expect(cached?.spec).toEqual({ tasks: [{ name: "build", run: "make" }] });
      expect(cached?.status?.phase).toBe("Succeeded");
    }
  });

  it("keeps a pod's own annotations, the run's plan among them, and leaves the object it was given alone", () => {
    const raw = {
      metadata: {
        name: "nightly-1",
        namespace: "ops",
        managedFields,
        annotations: {
          "playbook.dev/plan": '{"name":"nightly"}',
          "playbook.dev/run-start-time": "2026-11-30T15:00:00.000Z",
        },
      },
      spec: { nodeName: "node-a", activeDeadlineSeconds: 3615 },
      status: { phase: "Running" },
    };
    const pod = parsePod(withoutUnreadFields(raw)) as PodView;
    expect(pod.metadata).not.toHaveProperty("managedFields");
    expect(pod.metadata.annotations).toEqual(raw.metadata.annotations);
    expect(pod.spec?.nodeName).toBe("node-a");
    expect(raw.metadata.managedFields).toBe(managedFields);
  });

  it("drops an annotations map that held only the last-applied copy", () => {
    const stripped = withoutUnreadFields(
      playbook("only", "1", { "kubectl.kubernetes.io/last-applied-configuration": "{}" }),
    ) as { metadata: Record<string, unknown> };
    expect(stripped.metadata).not.toHaveProperty("annotations");
  });
});

describe("the CRD's default status", () => {
  const defaulted = {
    phase: "Pending",
    conditions: [
      {
        type: "Succeeded",
        status: "Unknown",
        reason: "Pending",
        message: "the run has not started yet",
        lastTransitionTime: "1970-01-01T00:00:00Z",
      },
    ],
  };

  it("is read as no status: the controller wrote none", () => {
    const parsed = parseStoredPlaybook({ ...playbook("fresh", "1", {}), status: defaulted });
    expect(parsed?.status).toBeUndefined();
  });

  it("is not mistaken for a status the controller wrote, which has observedGeneration", () => {
    const written = { ...defaulted, observedGeneration: 1 };
    expect(parseStoredPlaybook({ ...playbook("seen", "2", {}), status: written })?.status).toEqual(written);
  });

  it("matches the default in the CRD, which both copies carry", () => {
    for (const file of ["crds", "charts/playbook-controller/files/crds"]) {
      const crd = parse(readFileSync(join(ROOT, file, "playbook.dev_playbooks.yaml"), "utf8"));
      const status = crd.spec.versions[0].schema.openAPIV3Schema.properties.status;
      expect(status.default).toEqual(defaulted);
    }
  });
});
