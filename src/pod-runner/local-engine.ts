// The container engine `playbook run` starts image tasks with: podman, else docker, whichever
// answers `info` first (PLAYBOOK_CONTAINER_ENGINE=podman|docker picks one). An engine counts only
// when it answers: a docker client without a daemon is no engine, and what it said is kept so the
// refusal can say why.
import { execFile } from "node:child_process";

export type EngineKind = "podman" | "docker";

export interface LocalEngine {
  kind: EngineKind;
  /** the command, as found on PATH */
  command: string;
  /**
   * The engine's containers run under a user namespace that maps their root to the invoking user
   * (rootless podman or docker): the task's user is then chosen differently (local-containers.ts).
   */
  rootless: boolean;
}

/** What was seen of one engine. */
export interface EngineLook {
  kind: EngineKind;
  /** its command is on PATH */
  found: boolean;
  /** why it does not count although it is on PATH: the last line it printed, or a timeout */
  error?: string;
}

export type EngineChoice = { engine: LocalEngine; looked: EngineLook[] } | { looked: EngineLook[] };

/** `info` asks the daemon (docker) or opens the storage (podman); the format says whether it is rootless. */
const INFO_ARGS: Record<EngineKind, string[]> = {
  podman: ["info", "--format", "{{.Host.Security.Rootless}}"],
  docker: ["info", "--format", "{{.ServerVersion}} {{json .SecurityOptions}}"],
};

export const ENGINE_VARIABLE = "PLAYBOOK_CONTAINER_ENGINE";

/** How long `info` may take before the engine counts as absent. */
const INFO_TIMEOUT_MS = Number(process.env.PLAYBOOK_ENGINE_PROBE_TIMEOUT_MS) || 20_000;

interface CommandResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** ENOENT: not on PATH; ETIMEDOUT: no answer in time */
  errno?: string;
}

function runCommand(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<CommandResult> {
  return new Promise((resolve) => {
    execFile(
      command,
      args,
      { env, timeout: INFO_TIMEOUT_MS, killSignal: "SIGKILL", maxBuffer: 1 << 20 },
      (error, stdout, stderr) => {
        if (!error) return resolve({ code: 0, stdout, stderr });
        const errno = (error as NodeJS.ErrnoException).code;
        resolve({
          code: typeof errno === "number" ? errno : null,
          stdout,
          stderr,
          errno: error.killed ? "ETIMEDOUT" : typeof errno === "string" ? errno : undefined,
        });
      },
    );
  });
}

function lastLine(text: string): string | undefined {
  return text.trim().split("\n").filter(Boolean).at(-1)?.trim();
}

/** Looks at one engine: on PATH, and answering `info`. */
export async function lookAt(
  kind: EngineKind,
  env: NodeJS.ProcessEnv = process.env,
): Promise<LocalEngine | EngineLook> {
  const result = await runCommand(kind, INFO_ARGS[kind], env);
  if (result.errno === "ENOENT") return { kind, found: false };
  if (result.errno === "ETIMEDOUT") {
    return { kind, found: true, error: `\`${kind} info\` gave no answer within ${INFO_TIMEOUT_MS / 1000} s` };
  }
  if (result.code !== 0) {
    const said =
      lastLine(result.stderr) ?? lastLine(result.stdout) ?? `exit code ${result.code ?? "unknown"}`;
    return { kind, found: true, error: `\`${kind} info\` failed: ${said}` };
  }
  // docker lists "name=rootless" among its security options when its daemon runs rootless.
  const rootless = kind === "podman" ? result.stdout.trim() === "true" : /name=rootless/.test(result.stdout);
  return { kind, command: kind, rootless };
}

/** podman first, then docker, unless PLAYBOOK_CONTAINER_ENGINE names one; the first that answers. */
export async function findEngine(env: NodeJS.ProcessEnv = process.env): Promise<EngineChoice> {
  const wanted = env[ENGINE_VARIABLE];
  const order: EngineKind[] =
    wanted === "docker" ? ["docker"] : wanted === "podman" ? ["podman"] : ["podman", "docker"];
  const looked: EngineLook[] = [];
  for (const kind of order) {
    const seen = await lookAt(kind, env);
    if ("command" in seen) return { engine: seen, looked };
    looked.push(seen);
  }
  return { looked };
}

/** What was found, in words: "neither podman nor docker is on PATH; docker is ... but ...". */
export function describeLooks(looked: readonly EngineLook[]): string {
  const missing = looked.filter((look) => !look.found).map((look) => look.kind);
  const parts: string[] = [];
  if (missing.length === 2) parts.push("neither podman nor docker is on PATH");
  else if (missing.length === 1) parts.push(`${missing[0]} is not on PATH`);
  for (const look of looked) {
    if (look.found) parts.push(`${look.kind} is on PATH but does not answer (${look.error ?? "failed"})`);
  }
  return parts.join("; ");
}

/** What to do about it: install podman or docker, or start docker's daemon. */
export function whatToInstall(looked: readonly EngineLook[]): string {
  const dockerSilent = looked.some((look) => look.kind === "docker" && look.found);
  return `install podman (Debian/Ubuntu: apt-get install podman) or docker${dockerSilent ? " (or start the Docker daemon)" : ""}`;
}
