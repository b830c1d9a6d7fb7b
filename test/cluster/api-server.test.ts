import { randomBytes } from "node:crypto";
import { ApiException, ApiextensionsV1Api, CustomObjectsApi } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { clusterClients, createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { waitFor } from "../harness/processes.js";

// What envtest is for: the apiserver's own validation and storage semantics, exercised on a
// throwaway CRD so these tests do not depend on crds/.
const { kubeConfig, core } = clusterClients();
const extensions = kubeConfig.makeApiClient(ApiextensionsV1Api);
const custom = kubeConfig.makeApiClient(CustomObjectsApi);
const group = `t${randomBytes(3).toString("hex")}.playbook.dev`;
const plural = "widgets";
const version = "v1";
let namespace: string;

const widgetSchema = z.object({
  metadata: z.object({ name: z.string(), resourceVersion: z.string(), generation: z.number() }),
  spec: z.object({ size: z.number() }),
  status: z.object({ observedGeneration: z.number() }).optional(),
});

const apiError = async (promise: Promise<unknown>) => {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ApiException);
  const { code, body } = error as ApiException<string>;
  return { code, message: z.object({ message: z.string() }).parse(JSON.parse(body)).message };
};

beforeAll(async () => {
  await extensions.createCustomResourceDefinition({
    body: {
      metadata: { name: `${plural}.${group}` },
      spec: {
        group,
        scope: "Namespaced",
        names: { plural, singular: "widget", kind: "Widget", listKind: "WidgetList" },
        versions: [
          {
            name: version,
            served: true,
            storage: true,
            subresources: { status: {} },
            schema: {
              openAPIV3Schema: {
                type: "object",
                properties: {
                  spec: {
                    type: "object",
                    required: ["size"],
                    properties: { size: { type: "integer", minimum: 1 }, mode: { type: "string" } },
                    x_kubernetes_validations: [
                      {
                        rule: "self.size <= 10 || self.mode == 'large'",
                        message: "size above 10 needs mode large",
                      },
                    ],
                  },
                  status: { type: "object", properties: { observedGeneration: { type: "integer" } } },
                },
              },
            },
          },
        ],
      },
    },
  });
  await waitFor(
    "the CRD to be established",
    async () => {
      const crd = await extensions.readCustomResourceDefinition({ name: `${plural}.${group}` });
      return crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")
        ? true
        : undefined;
    },
    { timeoutMs: 30_000 },
  );
  namespace = await createTestNamespace(core, "api-server");
});

afterAll(async () => {
  await deleteTestNamespace(core, namespace);
  await extensions.deleteCustomResourceDefinition({ name: `${plural}.${group}` }).catch(() => {});
});

const widget = (name: string, spec: Record<string, unknown>, status?: Record<string, unknown>) => ({
  apiVersion: `${group}/${version}`,
  kind: "Widget",
  metadata: { name },
  spec,
  ...(status ? { status } : {}),
});

const createWidget = (body: ReturnType<typeof widget>) =>
  custom.createNamespacedCustomObject({ group, version, namespace, plural, body });

describe("the apiserver", () => {
  it("enforces a CRD's structural schema and CEL rules", async () => {
    const cel = await apiError(createWidget(widget("big", { size: 20 })));
    expect(cel.code).toBe(422);
    expect(cel.message).toContain("size above 10 needs mode large");

    const schema = await apiError(createWidget(widget("zero", { size: 0 })));
    expect(schema.code).toBe(422);
    expect(schema.message).toContain("should be greater than or equal to 1");
  });

  it("writes status only through the status subresource and refuses a stale resourceVersion", async () => {
    const createdObject: unknown = await createWidget(widget("w", { size: 3 }, { observedGeneration: 99 }));
    const created = widgetSchema.parse(createdObject);
    // The parsed view drops apiVersion and kind; requests send the object as served.
    const served = z.record(z.string(), z.unknown()).parse(createdObject);
    expect(created.status).toBeUndefined();

    const withStatus = widgetSchema.parse(
      await custom.replaceNamespacedCustomObjectStatus({
        group,
        version,
        namespace,
        plural,
        name: "w",
        body: { ...served, status: { observedGeneration: created.metadata.generation } },
      }),
    );
    expect(withStatus.status?.observedGeneration).toBe(1);
    expect(withStatus.metadata.generation).toBe(1);

    const stale = await apiError(
      custom.replaceNamespacedCustomObject({
        group,
        version,
        namespace,
        plural,
        name: "w",
        body: { ...served, spec: { size: 4 } },
      }),
    );
    expect(stale.code).toBe(409);
    expect(stale.message).toContain("the object has been modified");
  });
});
