// The controller's side of `--agent-delivery auto`: the API server's version, read once at the
// start, and every node's container runtime, watched, so that a node that joins with an older
// runtime turns the choice back to post-start before the next pod is built. Each change of the
// choice is logged and shown by the playbook_agent_delivery gauge. A fixed setting watches nothing.
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

const NodeSchema = z.looseObject({
  metadata: z.looseObject({ name: z.string(), resourceVersion: z.string().optional() }),
  status: z
    .looseObject({
      nodeInfo: z.looseObject({ containerRuntimeVersion: z.string().optional() }).optional(),
    })
    .optional(),
});
type NodeView = z.infer<typeof NodeSchema>;

const VersionSchema = z.looseObject({ gitVersion: z.string() });

/** How long the first choice waits for the nodes' list before it goes on without it. */
const NODES_LIST_WAIT_MS = 10_000;

/** Only what the choice reads is cached: a node object is mostly images and conditions. */
function runtimeOnly(raw: unknown): unknown {
  const node = NodeSchema.safeParse(raw);
  if (!node.success) return raw;
  return {
    metadata: { name: node.data.metadata.name, resourceVersion: node.data.metadata.resourceVersion },
    status: { nodeInfo: { containerRuntimeVersion: node.data.status?.nodeInfo?.containerRuntimeVersion } },
  };
}

export interface AgentDeliveryWatchOptions {
  setting: AgentDeliverySetting;
  api: ApiClient;
  log: Logger;
  metrics: ControllerMetrics;
  watchTimeoutMs: number;
  /** Called with each new choice, the first one included. */
  onChoice: (delivery: AgentDelivery) => void;
}

export class AgentDeliveryWatch {
  private readonly options: AgentDeliveryWatchOptions;
  private readonly nodes: Informer<NodeView> | null;
  private serverVersion: string | undefined;
  private current: DeliveryChoice | undefined;
  /** The first choice waits for the nodes' first list: until then pods get the postStart hook. */
  private synced = false;

  constructor(options: AgentDeliveryWatchOptions) {
    this.options = options;
    this.nodes =
      options.setting === "auto"
        ? new Informer<NodeView>({
            resource: "nodes",
            api: options.api,
            watchPath: "/api/v1/nodes",
            list: (cont) => options.api.listPage("/api/v1/nodes", { limit: 500, continue: cont }),
            parse: (raw) => NodeSchema.safeParse(raw).data ?? null,
            transform: runtimeOnly,
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

  /** The choice now (post-start until the cluster has been seen). */
  get delivery(): AgentDelivery {
    return this.current?.delivery ?? (this.options.setting === "auto" ? "post-start" : this.options.setting);
  }

  /** Reads the API server's version and starts the nodes' watch; `waitForSync` makes the first choice. */
  async start(): Promise<void> {
    if (this.nodes) {
      try {
        const answer = VersionSchema.parse(await this.options.api.call({ method: "GET", path: "/version" }));
        this.serverVersion = answer.gitVersion;
      } catch (error) {
        this.options.log.warn(
          { err: error },
          "Could not read the API server's version: task-image pods get the agent from a postStart hook",
        );
      }
      this.nodes.start();
    }
  }

  /** Resolves once the first choice is made: at once for a fixed setting, else after the nodes' list. */
  async waitForSync(): Promise<void> {
    if (this.nodes) {
      // Never a reason not to reconcile: a controller that may not list nodes (no RBAC for them)
      // goes on with the postStart hook, and takes image volumes if the list comes later.
      const listed = await Promise.race([
        this.nodes.waitForSync().then(() => true),
        delay(NODES_LIST_WAIT_MS, false, { ref: false }),
      ]);
      if (!listed) {
        this.options.log.warn(
          { problem: this.nodes.problem },
          "Could not list the nodes yet: task-image pods get the agent from a postStart hook until they are",
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
    const nodes = (this.nodes?.list() ?? []).map((node) => ({
      name: node.metadata.name,
      runtime: node.status?.nodeInfo?.containerRuntimeVersion ?? "",
    }));
    const choice = chooseAgentDelivery(this.options.setting, { serverVersion: this.serverVersion, nodes });
    const changed = this.current?.delivery !== choice.delivery;
    this.current = choice;
    if (!changed) return;
    this.options.log.info(
      { delivery: choice.delivery, why: choice.why },
      "Chose how task containers get the agent",
    );
    for (const delivery of ["image-volume", "post-start"] as const) {
      this.options.metrics.agentDelivery.set({ delivery }, delivery === choice.delivery ? 1 : 0);
    }
    this.options.onChoice(choice.delivery);
  }
}
