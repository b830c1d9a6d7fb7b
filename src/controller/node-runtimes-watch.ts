// The controller's side of `--agent-delivery auto` and `--user-namespaces auto`: the API server's
// version, read once at the start, and every node's container runtime and its default runtime
// handler's user-namespace support, watched by one informer, so that a node that joins with an
// older runtime turns the agent's delivery back to post-start, and one without user namespaces
// turns run pods back to the host's user namespace, before the next pod is built. Each choice is
// decided on its own (pods/agent-delivery.ts, pods/user-namespaces.ts); each change of it is logged
// and shown by its gauge (playbook_agent_delivery, playbook_user_namespaces). A fixed setting
// watches nothing: with both fixed there is no version read and no informer.
import { setTimeout as delay } from "node:timers/promises";
import type { Logger } from "pino";
import { z } from "zod";
import type { ApiClient } from "../runtime/api-client.js";
import { Informer } from "../runtime/informer.js";
import type { ControllerMetrics } from "./metrics.js";
import {
  type AgentDelivery,
  type AgentDeliverySetting,
  chooseAgentDelivery,
  type DeliveryChoice,
} from "./pods/agent-delivery.js";
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

/** How long the first choices wait for the nodes' list before they go on without it. */
const NODES_LIST_WAIT_MS = 10_000;

/** The choices this watch makes, each from its own setting. */
type Concern = "agentDelivery" | "userNamespaces";

/** What each `auto` choice does while the version is unknown, logged once per choice. */
const VERSION_UNREAD: Record<Concern, string> = {
  agentDelivery:
    "Could not read the API server's version: task-image pods get the agent from a postStart hook",
  userNamespaces: "Could not read the API server's version: run pods share the node's user namespace",
};

/** What each `auto` choice does until the nodes are listed, logged once per choice. */
const NOT_LISTED: Record<Concern, string> = {
  agentDelivery:
    "Could not list the nodes yet: task-image pods get the agent from a postStart hook until they are",
  userNamespaces: "Could not list the nodes yet: run pods share the node's user namespace until they are",
};

/** The default runtime handler (named "") is the one a pod without runtimeClassName runs under. */
function nodeView(node: NodeView): UserNamespacesNode {
  const handler = node.status?.runtimeHandlers?.find((h) => (h.name ?? "") === "");
  return {
    name: node.metadata.name,
    runtime: node.status?.nodeInfo?.containerRuntimeVersion ?? "",
    userNamespaces: handler?.features?.userNamespaces,
  };
}

/** Only what the choices read is cached: a node object is mostly images and conditions. */
function choicesOnly(raw: unknown): unknown {
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

export interface NodeRuntimesWatchOptions {
  /** `--agent-delivery`. */
  agentDelivery: AgentDeliverySetting;
  /** `--user-namespaces`. */
  userNamespaces: UserNamespacesSetting;
  api: ApiClient;
  log: Logger;
  metrics: ControllerMetrics;
  watchTimeoutMs: number;
  /** How long the first choices wait for the nodes' list (tests shorten it); default 10 s. */
  listWaitMs?: number;
  /** Called with each new agent delivery, the first one included. */
  onAgentDelivery: (delivery: AgentDelivery) => void;
  /** Called with each new user-namespaces choice, the first one included. */
  onUserNamespaces: (enabled: boolean) => void;
}

export class NodeRuntimesWatch {
  private readonly options: NodeRuntimesWatchOptions;
  /** The choices whose setting is `auto`: the ones the version and the nodes decide. */
  private readonly autos: Concern[];
  private readonly nodes: Informer<NodeView> | null;
  private serverVersion: string | undefined;
  private currentDelivery: DeliveryChoice | undefined;
  private currentUserNamespaces: UserNamespacesChoice | undefined;
  /**
   * Which choices are made (and follow the nodes from then on). An `auto` one waits for the
   * nodes' first list: until then pods get the postStart hook and share the host's user namespace.
   */
  private readonly deciding: Record<Concern, boolean> = { agentDelivery: false, userNamespaces: false };

  constructor(options: NodeRuntimesWatchOptions) {
    this.options = options;
    this.autos = (["agentDelivery", "userNamespaces"] as const).filter(
      (concern) => options[concern] === "auto",
    );
    this.nodes =
      this.autos.length > 0
        ? new Informer<NodeView>({
            resource: "nodes",
            api: options.api,
            watchPath: "/api/v1/nodes",
            list: (cont) => options.api.listPage("/api/v1/nodes", { limit: 500, continue: cont }),
            parse: (raw) => NodeSchema.safeParse(raw).data ?? null,
            transform: choicesOnly,
            keyOf: (node) => node.metadata.name,
            resourceVersionOf: (node) => node.metadata.resourceVersion,
            watchTimeoutMs: options.watchTimeoutMs,
            resyncMs: 0,
            log: options.log,
          })
        : null;
    this.nodes?.addHandlers({ onUpsert: () => this.decide(), onDelete: () => this.decide() });
  }

  /** The agent's delivery now (post-start until the cluster has been seen under auto). */
  get agentDelivery(): AgentDelivery {
    const setting = this.options.agentDelivery;
    return this.currentDelivery?.delivery ?? (setting === "auto" ? "post-start" : setting);
  }

  /** Whether run pods get their own user namespace now (off until the cluster has been seen under auto). */
  get userNamespaces(): boolean {
    return this.currentUserNamespaces?.enabled ?? this.options.userNamespaces === "on";
  }

  /** Reads the API server's version and starts the nodes' watch; `waitForSync` makes the first choices. */
  async start(): Promise<void> {
    if (!this.nodes) return;
    try {
      const answer = VersionSchema.parse(await this.options.api.call({ method: "GET", path: "/version" }));
      this.serverVersion = answer.gitVersion;
    } catch (error) {
      for (const concern of this.autos) this.options.log.warn({ err: error }, VERSION_UNREAD[concern]);
    }
    this.nodes.start();
  }

  /** Resolves once the first choices are made: a fixed one at once, an `auto` one after the nodes' list. */
  async waitForSync(): Promise<void> {
    this.deciding.agentDelivery = this.options.agentDelivery !== "auto";
    this.deciding.userNamespaces = this.options.userNamespaces !== "auto";
    this.decide();
    if (this.nodes) {
      // Never a reason not to reconcile: a controller that may not list nodes (no RBAC for them)
      // goes on with the postStart hook and without user namespaces, and takes image volumes and
      // user namespaces if the list comes later.
      const listed = await Promise.race([
        this.nodes.waitForSync().then(() => true),
        delay(this.options.listWaitMs ?? NODES_LIST_WAIT_MS, false, { ref: false }),
      ]);
      if (!listed) {
        for (const concern of this.autos)
          this.options.log.warn({ problem: this.nodes.problem }, NOT_LISTED[concern]);
      }
    }
    this.deciding.agentDelivery = true;
    this.deciding.userNamespaces = true;
    this.decide();
  }

  async stop(): Promise<void> {
    await this.nodes?.stop();
  }

  private decide(): void {
    const nodes = (this.nodes?.list() ?? []).map(nodeView);
    const cluster = { serverVersion: this.serverVersion, nodes };
    if (this.deciding.agentDelivery)
      this.decideAgentDelivery(chooseAgentDelivery(this.options.agentDelivery, cluster));
    if (this.deciding.userNamespaces) {
      this.decideUserNamespaces(chooseUserNamespaces(this.options.userNamespaces, cluster));
    }
  }

  private decideAgentDelivery(choice: DeliveryChoice): void {
    const changed = this.currentDelivery?.delivery !== choice.delivery;
    this.currentDelivery = choice;
    if (!changed) return;
    this.options.log.info(
      { delivery: choice.delivery, why: choice.why },
      "Chose how task containers get the agent",
    );
    for (const delivery of ["image-volume", "post-start"] as const) {
      this.options.metrics.agentDelivery.set({ delivery }, delivery === choice.delivery ? 1 : 0);
    }
    this.options.onAgentDelivery(choice.delivery);
  }

  private decideUserNamespaces(choice: UserNamespacesChoice): void {
    const changed = this.currentUserNamespaces?.enabled !== choice.enabled;
    this.currentUserNamespaces = choice;
    if (!changed) return;
    this.options.log.info(
      { userNamespaces: choice.enabled ? "on" : "off", why: choice.why },
      "Chose whether run pods get their own user namespace",
    );
    this.options.metrics.userNamespaces.set(choice.enabled ? 1 : 0);
    this.options.onUserNamespaces(choice.enabled);
  }
}
