// `playbook run` and tasks that name an image: they run in that image through podman or docker
// (src/pod-runner/local-engine.ts, local-containers.ts), or, with --on-host, on this machine as every
// other task does. Decided before anything runs: with neither engine and no --on-host the run is
// refused (exit 2) naming the first such task, its image and what to install.
import type { PlaybookSpec, TaskSpec } from "../api/playbook.js";
import { allTasksOf } from "../api/task-images.js";
import {
  type AgentFiles,
  findAgentFiles,
  planTaskContainers,
  type TaskContainer,
} from "./local-containers.js";
import { describeLooks, findEngine, type LocalEngine, whatToInstall } from "./local-engine.js";

/**
 * A task's effective image: its own, else spec.image, else the --policy file's default;
 * undefined runs it on the host (the runner image of a cluster is this machine locally).
 */
export function effectiveImage(
  task: TaskSpec,
  spec: Pick<PlaybookSpec, "image">,
  policyDefault?: string,
): string | undefined {
  return task.image ?? spec.image ?? policyDefault;
}

/** How the run's image tasks run: in their containers, or on the host (--on-host). */
export type LocalImages =
  | {
      mode: "containers";
      engine: LocalEngine;
      agent: AgentFiles;
      containers: TaskContainer[];
      /** each task's container (undefined: on the host) */
      containerOf: (string | undefined)[];
      images: (string | undefined)[];
    }
  | {
      mode: "host";
      /** each task's image, which --on-host does not use */
      images: (string | undefined)[];
    };

/**
 * What the run's image tasks need, or why they cannot run (the message of an exit 2). Undefined
 * when no task names an image: the run is as it always was.
 */
export async function prepareLocalImages(
  spec: Pick<PlaybookSpec, "image" | "tasks" | "finally">,
  onHost: boolean,
  policyDefault?: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<LocalImages | { error: string } | undefined> {
  // The finally tasks count on after the main ones, as the runner counts them.
  const all = allTasksOf(spec);
  const images = all.map(({ task }) => effectiveImage(task, spec, policyDefault));
  const first = all.findIndex((_, index) => images[index] !== undefined);
  if (first < 0) return undefined;
  if (onHost) return { mode: "host", images };
  const { containers, containerOf } = planTaskContainers(images);
  const choice = await findEngine(env);
  const { task, path } = all[first] as { task: TaskSpec; path: [string, number] };
  const where = `spec.${path[0]}[${path[1]}]`;
  if (!("engine" in choice)) {
    return {
      error:
        `task ${task.name} (${where}) runs in image ${images[first]}, and no container engine answers: ` +
        `${describeLooks(choice.looked)}; ${whatToInstall(choice.looked)}, or pass --on-host to run ` +
        "the tasks that name an image on this machine instead; nothing was run",
    };
  }
  const agent = findAgentFiles(env);
  if ("error" in agent) {
    return {
      error: `task ${task.name} (${where}) runs in image ${images[first]}, but ${agent.error}; nothing was run`,
    };
  }
  return { mode: "containers", engine: choice.engine, agent, containers, containerOf, images };
}

/** Where each task that names an image runs, as the progress says it. */
export function describePlacement(images: LocalImages | undefined): (string | undefined)[] | undefined {
  if (!images) return undefined;
  if (images.mode === "host") {
    return images.images.map((image) => (image ? `on the host, not in ${image} (--on-host)` : undefined));
  }
  return images.images.map((image, index) =>
    image ? `in ${image} (${images.engine.kind}, container ${images.containerOf[index]})` : undefined,
  );
}

/** spec.resources.limits as the engines take them (--memory, --cpus). */
export function containerLimits(resources: { limits?: Record<string, string | number> } | undefined): {
  memory?: string;
  cpu?: string;
} {
  const limits = resources?.limits ?? {};
  return {
    ...(limits.memory !== undefined ? { memory: String(limits.memory) } : {}),
    ...(limits.cpu !== undefined ? { cpu: String(limits.cpu) } : {}),
  };
}
