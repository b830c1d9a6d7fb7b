// Global setup of the `image` test project: the project's image, built when it is missing or was
// built from other sources than this checkout's (always with PLAYBOOK_IMAGE_REBUILD=1), and a
// Docker-compatible socket for testcontainers: podman's own service under the project's cache
// folder, stopped in teardown, or docker's.
import type {} from "vitest";
import type { TestProject } from "vitest/node";
import { containerEngine, startEngineService } from "../harness/container-engine.js";
import { buildImage, imageName, imageStaleness } from "../harness/image.js";
import { ensurePrerequisites, IMAGE_PREREQUISITES, installForbiddenByEnv } from "../harness/prerequisites.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** playbook-controller:<version>, in the engine's local storage. */
    image: string;
    /** DOCKER_HOST and the testcontainers settings (Ryuk off, mapped ports on 127.0.0.1). */
    engineEnv: Record<string, string>;
  }
}

const log = (message: string): void => {
  process.stderr.write(`[image] ${message}\n`);
};

export default async function setup(project: TestProject) {
  ensurePrerequisites({ install: !installForbiddenByEnv(), log, prerequisites: IMAGE_PREREQUISITES });
  const engine = containerEngine();
  const image = imageName();
  const stale =
    process.env.PLAYBOOK_IMAGE_REBUILD === "1" ? "PLAYBOOK_IMAGE_REBUILD=1" : await imageStaleness(engine);
  if (stale) {
    log(`${stale}: building it`);
    await buildImage(engine, { log });
  } else {
    log(`${image} is current (built from this checkout's Dockerfile, package files and src/)`);
  }
  const service = await startEngineService(engine);
  log(`${engine.kind} at ${service.env.DOCKER_HOST}`);
  project.provide("image", image);
  project.provide("engineEnv", service.env);
  return () => service.stop();
}
