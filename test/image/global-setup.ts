// Global setup of the `image` test project: the project's image, built when it is missing or was
// built from other sources than this checkout's (always with PLAYBOOK_IMAGE_REBUILD=1), and a
// Docker-compatible socket for testcontainers: podman's own service under the project's cache
// folder, stopped in teardown, or docker's.
//
// A failure here (no engine that answers, a package not installed, a failed build) never throws:
// a global setup that throws ends the whole vitest run, unit and cluster suites included. It is
// provided as imageError instead, and every image test file fails with it (test/image/support.ts).
import type {} from "vitest";
import type { TestProject } from "vitest/node";
import { containerEngine, type EngineService, startEngineService } from "../harness/container-engine.js";
import { buildImage, imageName, imageStaleness } from "../harness/image.js";
import { ensurePrerequisites, IMAGE_PREREQUISITES, installForbiddenByEnv } from "../harness/prerequisites.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** playbook-controller:<version>, in the engine's local storage. */
    image: string;
    /** DOCKER_HOST and the testcontainers settings (Ryuk off, mapped ports on 127.0.0.1). */
    engineEnv: Record<string, string>;
    /** Why the image or the engine is not there: each image test file fails with it. Empty when all is well. */
    imageError: string;
  }
}

const log = (message: string): void => {
  process.stderr.write(`[image] ${message}\n`);
};

/** The image and the engine's socket, or the error that kept them from being there. */
export async function prepareImage(): Promise<{ image: string; service: EngineService }> {
  ensurePrerequisites({
    install: !installForbiddenByEnv(),
    log,
    prerequisites: IMAGE_PREREQUISITES,
    why: "the image tests build the project's image with podman (runc, CNI plugins) and, where no registry answers, make the base's stand-in with debootstrap",
  });
  const engine = containerEngine();
  log(`${engine.kind} answers: building and running the image with it`);
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
  return { image, service };
}

export default async function setup(project: TestProject) {
  try {
    const { image, service } = await prepareImage();
    project.provide("image", image);
    project.provide("engineEnv", service.env);
    project.provide("imageError", "");
    return () => service.stop();
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    log(`the image tests will fail: ${reason}`);
    project.provide("image", imageName());
    project.provide("engineEnv", {});
    project.provide("imageError", `the project's image could not be built or run: ${reason}`);
    return undefined;
  }
}
