import path from "node:path";
import { z } from "zod";
import { repoRoot } from "../binaries.js";
import type { CommandMapping } from "./pod-spec.js";

const mappingSchema = z.object({
  commands: z.record(z.string(), z.array(z.string()).min(1)).default({}),
  images: z.record(z.string(), z.array(z.string()).min(1)).default({}),
});

/**
 * `playbook` (the runner image's command, and its entrypoint after tini: `tini -- playbook`) runs this
 * checkout's bundle, dist/bin/playbook.js (what the image runs), under the current Node.
 * PROCESS_NODE_MAPPING (JSON: {"commands": {...}, "images": {...}}) adds or overrides entries.
 */
export function defaultCommandMapping(env: NodeJS.ProcessEnv = process.env): CommandMapping {
  const playbook = [process.execPath, path.join(repoRoot(), "dist", "bin", "playbook.js")];
  const extra = env.PROCESS_NODE_MAPPING
    ? mappingSchema.parse(JSON.parse(env.PROCESS_NODE_MAPPING))
    : undefined;
  return {
    commands: { playbook, ...extra?.commands },
    images: { "ghcr.io/playbook-controller/playbook-controller": playbook, ...extra?.images },
  };
}
