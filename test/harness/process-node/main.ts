// Runs the process node as its own process, for `npm run cluster:up`.
import { writeFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { pino } from "pino";
import { z } from "zod";
import { defaultCommandMapping } from "./mapping.js";
import { ProcessNode } from "./process-node.js";

const { values } = parseArgs({
  options: {
    kubeconfig: { type: "string" },
    "work-dir": { type: "string" },
    "node-name": { type: "string" },
    "control-url-file": { type: "string" },
  },
});
const args = z
  .object({
    kubeconfig: z.string(),
    "work-dir": z.string(),
    "node-name": z.string().default("process-node"),
    "control-url-file": z.string().optional(),
  })
  .parse(values);

const logger = pino({ name: "process-node" });
const kubeConfig = new KubeConfig();
kubeConfig.loadFromFile(args.kubeconfig);
const node = new ProcessNode({
  kubeConfig,
  nodeName: args["node-name"],
  workDir: args["work-dir"],
  mapping: defaultCommandMapping(),
  log: (fields, message) => logger.info(fields, message),
});

let stopping = false;
const shutdown = async (signal: string) => {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, "Stopping process node");
  await node.stop();
  process.exit(0);
};
process.on("SIGTERM", () => void shutdown("SIGTERM"));
process.on("SIGINT", () => void shutdown("SIGINT"));

await node.start();
const controlUrl = await node.listenControl();
if (args["control-url-file"]) await writeFile(args["control-url-file"], `${controlUrl}\n`);
logger.info({ controlUrl }, "Process node ready");
