// The controller's side of `--user-namespaces auto`: the API server's version, read once at the
// start, and every node's container runtime and its default runtime handler's user-namespace
// support, watched, so that a node that joins without it turns run pods back to the host's user
// namespace before the next pod is built. Each change of the choice is logged and shown by the
// playbook_user_namespaces gauge. A fixed setting watches nothing.
import { setTimeout as delay } from "node:timers/promises";
import type { Logger } from "pino";
import { z } from "zod";
import type { ApiClient } from "../runtime/api-client.js";
import { Informer } from "../runtime/informer.js";
import type { ControllerMetrics } from "./metrics.js";
import {
  chooseUserNamespaces,
  type UserNamespacesChoice,
  type UserNamespacesNode,
  type UserNamespacesSetting,
} from "./pods/user-namespaces.js";

const NodeSchema = z.looseObject({
  metadata: z.looseObject({ name: z.string(), resourceVersion: z.string().optional() }),
  status: z
    .looseObject({
      nodeInfo: z.looseObject({ containerRuntimeVersion: z.string().optional() }).optional(),
      runtimeHandlers: z
        .array(
          z.looseObject({
            name: z.string().optional(),
            features: z.looseObject({ userNamespaces: z.boolean().optional() }).optional(),
          }),
        )
        .optional(),
    })
    .optional(),
});
type NodeView = z.infer<typeof NodeSchema>;

const VersionSchema = z.looseObject({ gitVersion: z.string() });

/** How long the first choice waits for the nodes' list before it goes on without it. */
const NODES_LIST_WAIT_MS = 10_000;

/** The default runtime handler (named "") is the one a pod without runtimeClassName runs under. */
function nodeView(node: NodeView): UserNamespacesNode {
  const handler = node.status?.runtimeHandlers?.find((h) => (h.name ?? "") === "");
  return {
    name: node.metadata.name,
    runtime: node.status?.nodeInfo?.containerRuntimeVersion ?? "",
    userNamespaces: handler?.features?.userNamespaces,
  };
}

/** Only what the choice reads is cached: a node object is mostly images and conditions. */
function choiceOnly(raw: unknown): unknown {
  const node = NodeSchema.safeParse(raw);
  if (!node.success) return raw;
  const view = nodeView(node.data);
  return {
    metadata: { name: node.data.metadata.name, resourceVersion: node.data.metadata.resourceVersion },
    status: {
      nodeInfo: { containerRuntimeVersion: view.runtime },
      ...(view.userNamespaces === undefined
        ? {}
        : { runtimeHandlers: [{ name: "", features: { userNamespaces: view.userNamespaces } }] }),
    },
  };
}

export interface UserNamespacesWatchOptions {
  setting: UserNamespacesSetting;
  api: ApiClient;
  log: Logger;
  metrics: ControllerMetrics;
  watchTimeoutMs: number;
  /** Called with each new choice, the first one included. */
  onChoice: (enabled: boolean) => void;
}

export class UserNamespacesWatch {
  private readonly options: UserNamespacesWatchOptions;
  private readonly nodes: Informer<NodeView> | null;
  private serverVersion: string | undefined;
  private current: UserNamespacesChoice | undefined;
  /** The first choice waits for the nodes' first list: until then pods share the host's. */
  private synced = false;

  constructor(options: UserNamespacesWatchOptions) {
    this.options = options;
    this.nodes =
      options.setting === "auto"
        ? new Informer<NodeView>({
            resource: "nodes",
            api: options.api,
            watchPath: "/api/v1/nodes",
            list: (cont) => options.api.listPage("/api/v1/nodes", { limit: 500, continue: cont }),
            parse: (raw) => NodeSchema.safeParse(raw).data ?? null,
            transform: choiceOnly,
            keyOf: (node) => node.metadata.name,
            resourceVersionOf: (node) => node.metadata.resourceVersion,
            watchTimeoutMs: options.watchTimeoutMs,
            resyncMs: 0,
            log: options.log,
          })
        : null;
    this.nodes?.addHandlers({ onUpsert: () => this.decide(), onDelete: () => this.decide() });
    if (!this.nodes) this.synced = true;
  }

  /** The choice now (off until the cluster has been seen under auto). */
  get enabled(): boolean {
    return this.current?.enabled ?? this.options.setting === "on";
  }

  /** Reads the API server's version and starts the nodes' watch; `waitForSync` makes the first choice. */
  async start(): Promise<void> {
    if (!this.nodes) return;
    try {
      const answer = VersionSchema.parse(await this.options.api.call({ method: "GET", path: "/version" }));
      this.serverVersion = answer.gitVersion;
    } catch (error) {
      this.options.log.warn(
        { err: error },
        "Could not read the API server's version: run pods share the node's user namespace",
      );
    }
    this.nodes.start();
  }

  /** Resolves once the first choice is made: at once for a fixed setting, else after the nodes' list. */
  async waitForSync(): Promise<void> {
    if (this.nodes) {
      // Never a reason not to reconcile: a controller that may not list nodes goes on without
      // user namespaces, and takes them if the list comes later.
      const listed = await Promise.race([
        this.nodes.waitForSync().then(() => true),
        delay(NODES_LIST_WAIT_MS, false, { ref: false }),
      ]);
      if (!listed) {
        this.options.log.warn(
          { problem: this.nodes.problem },
          "Could not list the nodes yet: run pods share the node's user namespace until they are",
        );
      }
    }
    this.synced = true;
    this.decide();
  }

  async stop(): Promise<void> {
    await this.nodes?.stop();
  }

  private decide(): void {
    if (!this.synced) return;
    const nodes = (this.nodes?.list() ?? []).map(nodeView);
    const choice = chooseUserNamespaces(this.options.setting, { serverVersion: this.serverVersion, nodes });
    const changed = this.current?.enabled !== choice.enabled;
    this.current = choice;
    if (!changed) return;
    this.options.log.info(
      { userNamespaces: choice.enabled ? "on" : "off", why: choice.why },
      "Chose whether run pods get their own user namespace",
    );
    this.options.metrics.userNamespaces.set(choice.enabled ? 1 : 0);
    this.options.onChoice(choice.enabled);
  }
}
