// The task containers' agent for tests: tools/build-agent.sh builds it (static, musl) once per
// test process and places Debian's static busybox beside it when busybox-static is installed.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { repoRoot } from "./binaries.js";

export interface AgentBinary {
  /** dist/agent/agent */
  agent: string;
  /** dist/agent/busybox, or null without busybox-static. */
  busybox: string | null;
}

let built: AgentBinary | undefined;

/** Builds the agent when agent.c changed; throws the script's message (naming musl-tools) when it cannot. */
export function agentBinary(): AgentBinary {
  if (built) return built;
  const script = path.join(repoRoot(), "tools", "build-agent.sh");
  let agent: string;
  try {
    agent = execFileSync("bash", [script], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).trim();
  } catch (error) {
    const stderr = String((error as { stderr?: unknown }).stderr ?? "").trim();
    throw new Error(`tools/build-agent.sh could not build the agent: ${stderr}`, { cause: error });
  }
  const busybox = path.join(path.dirname(agent), "busybox");
  built = { agent, busybox: existsSync(busybox) ? busybox : null };
  return built;
}
