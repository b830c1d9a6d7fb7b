// The runner image `cluster:up` needs on its real node (issue 34 item 2): without it every run's
// pod sits in ImagePullBackOff until its start timeout. Before anything starts, cluster:up checks
// the container engine's image as `npm run image:build` and the image tests do (image.ts:
// missing, or labelled with another source hash than this checkout's), builds it the same way
// when it is not current, and stops at once naming `npm run image:build` when it cannot.
import { containerEngine, forgetEngineProbes } from "./container-engine.js";
import { buildImage, IMAGE_TAG_VARIABLE, imageName, imageStaleness, type Log, pullMode } from "./image.js";
import { ensurePrerequisites, IMAGE_PREREQUISITES, MissingPrerequisiteError } from "./prerequisites.js";

export interface RunnerImageOptions {
  /** Build the image when it is missing or stale; false: stop naming `npm run image:build` instead. */
  build: boolean;
  /** May install podman and its helpers with apt-get (as image:build does) to build it. */
  install: boolean;
  log: Log;
}

/** What to do about the image, from what was seen: use it, build it, or stop with why. */
export type RunnerImageAction =
  | { action: "use"; why: string }
  | { action: "build"; why: string }
  | { action: "stop"; why: string };

const HOW = "`npm run image:build` builds it (as root it installs podman first)";

/** Pure: the engine's answer (or why there is none) and the image's staleness decide. */
export function decideRunnerImage(seen: {
  name: string;
  archive?: string | undefined;
  engineProblem?: string | undefined;
  stale?: string | undefined;
  build: boolean;
}): RunnerImageAction {
  if (seen.archive)
    return { action: "use", why: `the runner image from PLAYBOOK_IMAGE_ARCHIVE (${seen.archive})` };
  const pods = "without it the real node's pods cannot start (ImagePullBackOff until their start timeout)";
  if (seen.engineProblem !== undefined)
    return {
      action: "stop",
      why: `the runner image ${seen.name} cannot be checked or built here: ${seen.engineProblem}. ${pods}; ${HOW}, or set PLAYBOOK_IMAGE_ARCHIVE to an OCI archive of it`,
    };
  if (seen.stale === undefined)
    return { action: "use", why: `the runner image ${seen.name} is current (built from this checkout)` };
  if (!seen.build)
    return {
      action: "stop",
      why: `${seen.stale}, and --no-image-build declines building it: ${pods}; run \`npm run image:build\` first`,
    };
  return { action: "build", why: `${seen.stale}: building it as \`npm run image:build\` does` };
}

/** Makes sure the engine holds a current runner image, building it when allowed; throws MissingPrerequisiteError when not. */
export async function ensureRunnerImage(options: RunnerImageOptions): Promise<void> {
  const { log } = options;
  let name: string;
  try {
    name = imageName();
  } catch (error) {
    throw new MissingPrerequisiteError(`${(error as Error).message} (${IMAGE_TAG_VARIABLE})`);
  }
  const archive = process.env.PLAYBOOK_IMAGE_ARCHIVE || undefined;
  let engineProblem: string | undefined;
  let engine: ReturnType<typeof containerEngine> | undefined;
  if (!archive) {
    if (options.build) {
      // As image:build: podman, runc, the CNI plugins and debootstrap, installed as root when allowed.
      try {
        ensurePrerequisites({
          install: options.install,
          log,
          prerequisites: IMAGE_PREREQUISITES,
          why: `cluster:up builds the runner image ${name} with podman, as npm run image:build does`,
        });
        forgetEngineProbes();
      } catch (error) {
        if (!(error instanceof MissingPrerequisiteError)) throw error;
        engineProblem = error.message.replaceAll("\n", "; ");
      }
    }
    if (engineProblem === undefined) {
      try {
        engine = containerEngine();
      } catch (error) {
        engineProblem = (error as Error).message;
      }
    }
  }
  const stale = engine ? await imageStaleness(engine) : undefined;
  const decision = decideRunnerImage({ name, archive, engineProblem, stale, build: options.build });
  if (decision.action === "stop") throw new MissingPrerequisiteError(decision.why);
  log(decision.why);
  if (decision.action === "use" || !engine) return;
  const started = Date.now();
  try {
    await buildImage(engine, { log, pull: pullMode(false) });
  } catch (error) {
    throw new MissingPrerequisiteError(
      `could not build the runner image ${name}: ${(error as Error).message}; fix that, run \`npm run image:build\`, then cluster:up again`,
    );
  }
  log(`Built ${name} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}
