// The informers' list pages through a collection (limit + continue, as client-go's reflector
// does), against the real API server: a large collection is never held as one answer, and a
// continue token the API server calls too old (410 Gone) starts the list again from its first page.
import path from "node:path";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { z } from "zod";
import { API_VERSION, GROUP, KIND, PLURAL, VERSION } from "../../src/api/playbook.js";
import { MetaSchema } from "../../src/controller/objects.js";
import { ApiClient, type ListPage } from "../../src/runtime/api-client.js";
import { Informer } from "../../src/runtime/informer.js";
import { clusterClients, createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { readClusterState } from "../harness/control-plane.js";
import { waitFor } from "../harness/processes.js";

const { kubeConfig, core } = clusterClients();
const custom = kubeConfig.makeApiClient(CustomObjectsApi);
const api = new ApiClient(kubeConfig);
const COUNT = 25;
const PAGE = 10;
let namespace = "";

const ObjectSchema = z.looseObject({ metadata: MetaSchema });
type Listed = z.infer<typeof ObjectSchema>;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "paging");
  await Promise.all(
    Array.from({ length: COUNT }, (_, i) =>
      custom.createNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        plural: PLURAL,
        namespace,
        body: {
          apiVersion: API_VERSION,
          kind: KIND,
          metadata: { name: `item-${String(i).padStart(2, "0")}` },
          spec: { tasks: [{ name: "t", run: "true" }] },
        },
      }),
    ),
  );
}, 60_000);

afterAll(async () => {
  api.close();
  await deleteTestNamespace(core, namespace);
});

/** An informer over the namespace's Playbooks, `PAGE` to a page, through the given list call. */
function playbookInformer(page: (cont: string | undefined) => Promise<ListPage>) {
  const watchPath = `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PLURAL}`;
  const informer = new Informer<Listed>({
    resource: "playbooks",
    api,
    watchPath,
    list: page,
    parse: (raw) => {
      const parsed = ObjectSchema.safeParse(raw);
      return parsed.success ? parsed.data : null;
    },
    keyOf: (object) => `${object.metadata.namespace}/${object.metadata.name}`,
    resourceVersionOf: (object) => object.metadata.resourceVersion,
    watchTimeoutMs: 60_000,
    resyncMs: 0,
    log: pino({ level: "silent" }),
  });
  return { informer, watchPath };
}

const names = (informer: Informer<Listed>) =>
  informer
    .list()
    .map((object) => object.metadata.name)
    .filter((name) => name.startsWith("item-"))
    .sort();
const expected = Array.from({ length: COUNT }, (_, i) => `item-${String(i).padStart(2, "0")}`);

/**
 * A continue token the API server calls too old (410 Gone), as when a slow list outlives the
 * compaction of its snapshot: etcd compacted at its current revision (as the API server itself
 * does every 5 minutes, so the other tests' watches already live with it), and the token pointed
 * at a revision before that.
 */
async function expiredToken(token: string, listPath: string): Promise<string> {
  const state = await readClusterState(path.dirname(inject("kubeconfig")));
  const etcd = `http://127.0.0.1:${state?.ports.etcd}`;
  const range = await fetch(`${etcd}/v3/kv/range`, {
    method: "POST",
    body: JSON.stringify({ key: Buffer.from("/").toString("base64") }),
  });
  const revision = z.object({ header: z.object({ revision: z.string() }) }).parse(await range.json())
    .header.revision;
  await fetch(`${etcd}/v3/kv/compaction`, { method: "POST", body: JSON.stringify({ revision }) });
  const decoded = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) as Record<string, unknown>;
  const expired = Buffer.from(JSON.stringify({ ...decoded, rv: 2 })).toString("base64url");
  // The API server may take a moment to see the compaction.
  await waitFor(
    "the API server to call the token expired",
    async () => {
      const status = await api.listPage(listPath, { limit: PAGE, continue: expired }).then(
        () => 200,
        (error: { code?: number }) => error.code,
      );
      return status === 410 ? true : undefined;
    },
    { timeoutMs: 30_000 },
  );
  return expired;
}

describe("the informer's list against the API server", () => {
  it("pages through a collection larger than one page and caches every object", async () => {
    const asked: (string | undefined)[] = [];
    const { informer, watchPath } = playbookInformer((cont) => {
      asked.push(cont);
      return api.listPage(watchPath, { limit: PAGE, continue: cont });
    });
    informer.start();
    try {
      await informer.waitForSync();
      expect(names(informer)).toEqual(expected);
      // 25 Playbooks, ten to a page.
      expect(asked).toHaveLength(3);
      expect(asked[0]).toBeUndefined();
      expect(asked.slice(1).every((token) => typeof token === "string" && token !== "")).toBe(true);
    } finally {
      await informer.stop();
    }
  });

  it("lists again from the first page when the API server says a continue token expired", async () => {
    const asked: (string | undefined)[] = [];
    const answers: (number | "ok")[] = [];
    let expired = false;
    const { informer, watchPath } = playbookInformer(async (cont) => {
      let token = cont;
      if (cont !== undefined && !expired) {
        expired = true;
        token = await expiredToken(cont, watchPath);
      }
      asked.push(token);
      try {
        const page = await api.listPage(watchPath, { limit: PAGE, continue: token });
        answers.push("ok");
        return page;
      } catch (error) {
        answers.push((error as { code?: number }).code ?? 0);
        throw error;
      }
    });
    informer.start();
    try {
      await informer.waitForSync();
      expect(names(informer)).toEqual(expected);
      expect(answers).toEqual(["ok", 410, "ok", "ok", "ok"]);
      expect(asked[2]).toBeUndefined();
      expect(informer.problem).toBeUndefined();
    } finally {
      await informer.stop();
    }
  });
});
