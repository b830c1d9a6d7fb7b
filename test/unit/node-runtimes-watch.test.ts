// The one watch of the cluster's version and nodes that `--agent-delivery auto` and
// `--user-namespaces auto` decide from, against a fake API client: what it reads, what it logs
// and chooses when the version or the list cannot be read, and a node that joins.
import { Writable } from "node:stream";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { ControllerMetrics } from "../../src/controller/metrics.js";
import {
  NodeRuntimesWatch,
  type NodeRuntimesWatchOptions,
} from "../../src/controller/node-runtimes-watch.js";
import type { ApiClient } from "../../src/runtime/api-client.js";

const node = (name: string, runtime: string, userNamespaces: boolean | undefined, rv = "1") => ({
  metadata: { name, resourceVersion: rv },
  status: {
    nodeInfo: { containerRuntimeVersion: runtime, osImage: "Debian" },
    images: [{ names: ["registry.example/big:1"], sizeBytes: 1 }],
    runtimeHandlers: [
      ...(userNamespaces === undefined ? [] : [{ name: "", features: { userNamespaces } }]),
      { name: "runsc", features: { userNamespaces: false } },
    ],
  },
});

interface Fake {
  api: ApiClient;
  calls: { version: number; lists: number; watches: number };
  /** Sends a watch event to the open watch. */
  send: (type: string, object: unknown) => void;
}

function fakeApi(version: string | Error, list: unknown[] | Error): Fake {
  const calls = { version: 0, lists: 0, watches: 0 };
  let onLine: ((line: string) => void) | undefined;
  const api = {
    call: async ({ path }: { path: string }) => {
      expect(path).toBe("/version");
      calls.version++;
      if (version instanceof Error) throw version;
      return { major: "1", gitVersion: version };
    },
    listPage: async (path: string) => {
      expect(path).toBe("/api/v1/nodes");
      calls.lists++;
      if (list instanceof Error) throw list;
      return { items: list, resourceVersion: "1" };
    },
    watch: (
      path: string,
      _query: unknown,
      handlers: { onOpen: () => void; onLine: (line: string) => void },
      { signal }: { signal: AbortSignal },
    ) => {
      expect(path).toBe("/api/v1/nodes");
      calls.watches++;
      handlers.onOpen();
      onLine = handlers.onLine;
      return new Promise<void>((resolve) =>
        signal.addEventListener("abort", () => resolve(), { once: true }),
      );
    },
  };
  return {
    api: api as unknown as ApiClient,
    calls,
    send: (type, object) => onLine?.(JSON.stringify({ type, object })),
  };
}

interface Line {
  level: number;
  msg: string;
  [field: string]: unknown;
}

let watches: NodeRuntimesWatch[] = [];
afterEach(async () => {
  for (const watch of watches) await watch.stop();
  watches = [];
});

function startWatch(
  fake: Fake,
  settings: Pick<NodeRuntimesWatchOptions, "agentDelivery" | "userNamespaces">,
) {
  const lines: Line[] = [];
  const log = pino(
    { level: "info" },
    new Writable({
      write(chunk, _encoding, done) {
        lines.push(JSON.parse(String(chunk)) as Line);
        done();
      },
    }),
  );
  const metrics = new ControllerMetrics({ defaults: false });
  const choices: (string | boolean)[] = [];
  const watch = new NodeRuntimesWatch({
    ...settings,
    api: fake.api,
    log,
    metrics,
    watchTimeoutMs: 60_000,
    listWaitMs: 200,
    onAgentDelivery: (delivery) => choices.push(delivery),
    onUserNamespaces: (enabled) => choices.push(enabled),
  });
  watches.push(watch);
  const gauges = async () => {
    const delivery = await metrics.agentDelivery.get();
    const userNamespaces = await metrics.userNamespaces.get();
    return {
      delivery: Object.fromEntries(delivery.values.map((v) => [String(v.labels.delivery), v.value])),
      userNamespaces: userNamespaces.values[0]?.value,
    };
  };
  const messages = (level: number) => lines.filter((line) => line.level === level).map((line) => line.msg);
  return { watch, lines, choices, gauges, warnings: () => messages(40), infos: () => messages(30) };
}

const until = async (check: () => boolean) => {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 5));
  expect(check()).toBe(true);
};

describe("NodeRuntimesWatch", () => {
  it("with both settings fixed reads nothing and chooses at once", async () => {
    const fake = fakeApi("v1.36.0", []);
    const { watch, choices, gauges, infos, lines } = startWatch(fake, {
      agentDelivery: "image-volume",
      userNamespaces: "off",
    });
    expect([watch.agentDelivery, watch.userNamespaces]).toEqual(["image-volume", false]);
    await watch.start();
    await watch.waitForSync();
    expect(fake.calls).toEqual({ version: 0, lists: 0, watches: 0 });
    expect(choices).toEqual(["image-volume", false]);
    expect(infos()).toEqual([
      "Chose how task containers get the agent",
      "Chose whether run pods get their own user namespace",
    ]);
    expect(lines.map((line) => line.why)).toEqual(["--agent-delivery image-volume", "--user-namespaces off"]);
    expect(await gauges()).toEqual({ delivery: { "image-volume": 1, "post-start": 0 }, userNamespaces: 0 });
  });

  it("with both auto reads the version once and lists the nodes once, and a node that joins turns both back", async () => {
    const fake = fakeApi("v1.36.0", [node("a", "containerd://2.4.2", true)]);
    const { watch, choices, gauges, warnings, lines } = startWatch(fake, {
      agentDelivery: "auto",
      userNamespaces: "auto",
    });
    expect([watch.agentDelivery, watch.userNamespaces]).toEqual(["post-start", false]);
    await watch.start();
    await watch.waitForSync();
    expect(fake.calls).toEqual({ version: 1, lists: 1, watches: 1 });
    expect(choices).toEqual(["image-volume", true]);
    expect(await gauges()).toEqual({ delivery: { "image-volume": 1, "post-start": 0 }, userNamespaces: 1 });

    // A node whose runtime reports user namespaces and is new enough for both changes nothing.
    fake.send("ADDED", node("b", "containerd://2.1.0", true, "2"));
    fake.send("ADDED", node("c", "containerd://1.7.20", false, "3"));
    await until(() => choices.length === 4);
    expect(choices).toEqual(["image-volume", true, "post-start", false]);
    expect([watch.agentDelivery, watch.userNamespaces]).toEqual(["post-start", false]);
    expect(lines.slice(-2).map((line) => line.why)).toEqual([
      "auto: node c runs containerd://1.7.20 (image volumes need containerd 2.1+ or CRI-O 1.31+)",
      "auto: node c runs containerd://1.7.20 (user namespaces need containerd 2.0+ or CRI-O 1.25+)",
    ]);
    expect(await gauges()).toEqual({ delivery: { "image-volume": 0, "post-start": 1 }, userNamespaces: 0 });

    fake.send("DELETED", node("c", "containerd://1.7.20", false, "4"));
    await until(() => choices.length === 6);
    expect(choices.slice(4)).toEqual(["image-volume", true]);
    expect(warnings()).toEqual([]);
  });

  it("caches only the runtime and the default handler's user namespaces", async () => {
    const fake = fakeApi("v1.36.0", [node("a", "containerd://2.4.2", false)]);
    const { watch, lines } = startWatch(fake, { agentDelivery: "auto", userNamespaces: "auto" });
    await watch.start();
    await watch.waitForSync();
    // The runsc handler's false is not the default handler's: the default one decides.
    expect(watch.userNamespaces).toBe(false);
    expect(lines.at(-1)?.why).toContain("status.runtimeHandlers[].features.userNamespaces is false");
    const nodes = (watch as unknown as { nodes: { list(): unknown[] } }).nodes.list();
    expect(nodes).toEqual([
      {
        metadata: { name: "a", resourceVersion: "1" },
        status: {
          nodeInfo: { containerRuntimeVersion: "containerd://2.4.2" },
          runtimeHandlers: [{ name: "", features: { userNamespaces: false } }],
        },
      },
    ]);
  });

  it("says once per auto setting that the version could not be read, and chooses without it", async () => {
    const fake = fakeApi(new Error("403 forbidden"), [node("a", "containerd://2.4.2", true)]);
    const { watch, choices, warnings, lines } = startWatch(fake, {
      agentDelivery: "auto",
      userNamespaces: "auto",
    });
    await watch.start();
    await watch.waitForSync();
    expect(warnings()).toEqual([
      "Could not read the API server's version: task-image pods get the agent from a postStart hook",
      "Could not read the API server's version: run pods share the node's user namespace",
    ]);
    expect(choices).toEqual(["post-start", false]);
    expect(lines.slice(-2).map((line) => line.why)).toEqual([
      "auto: the API server is of an unknown version, image volumes need Kubernetes 1.35+",
      "auto: the API server is of an unknown version, user namespaces need Kubernetes 1.33+",
    ]);
  });

  it("with one setting auto warns for that one only, and the fixed one is chosen before the list", async () => {
    const fake = fakeApi(new Error("403 forbidden"), new Error("403 nodes is forbidden"));
    const { watch, choices, warnings, gauges } = startWatch(fake, {
      agentDelivery: "post-start",
      userNamespaces: "auto",
    });
    await watch.start();
    const synced = watch.waitForSync();
    expect(choices).toEqual(["post-start"]);
    await synced;
    expect(choices).toEqual(["post-start", false]);
    expect(warnings().filter((msg) => msg.startsWith("Could not"))).toEqual([
      "Could not read the API server's version: run pods share the node's user namespace",
      "Could not list the nodes yet: run pods share the node's user namespace until they are",
    ]);
    expect(await gauges()).toEqual({ delivery: { "image-volume": 0, "post-start": 1 }, userNamespaces: 0 });
  });

  it("goes on when the nodes cannot be listed within the wait, saying so once per auto setting", async () => {
    const fake = fakeApi("v1.36.0", new Error("403 nodes is forbidden"));
    const { watch, choices, warnings, lines } = startWatch(fake, {
      agentDelivery: "auto",
      userNamespaces: "auto",
    });
    await watch.start();
    await watch.waitForSync();
    expect(warnings().filter((msg) => msg.startsWith("Could not"))).toEqual([
      "Could not list the nodes yet: task-image pods get the agent from a postStart hook until they are",
      "Could not list the nodes yet: run pods share the node's user namespace until they are",
    ]);
    const listWarnings = lines.filter((line) => String(line.msg).startsWith("Could not list"));
    expect(listWarnings.every((line) => String(line.problem).startsWith("list failed:"))).toBe(true);
    expect(choices).toEqual(["post-start", false]);
    expect(lines.slice(-2).map((line) => line.why)).toEqual([
      "auto: no node has reported its container runtime yet",
      "auto: no node has reported its container runtime yet",
    ]);
  });
});
