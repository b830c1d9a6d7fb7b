# The runner and controller image. Its entrypoint is `tini -- playbook`, so arguments are the
# subcommand: `docker run IMAGE run -f FILE`, and the chart's Deployment passes `controller ...` as
# args. tini is PID 1 so that processes orphaned by tasks are reaped (Node does not reap children
# it did not spawn) when the image runs as it is. In the runner pods the controller makes, the
# container command (`playbook pod-runner`) replaces this entrypoint; there the pod shares its PID
# namespace and the sandbox's pause process reaps instead.
# The runtime stage's root before the project's files: Node's base and three packages from Debian.
# tini reaps orphans; procps gives `ps` to whoever execs into a pod to look at its tasks;
# busybox-static is the task containers' shell where a task's image has none: the pod's init
# container copies it with the agent onto the volume the task containers mount (docs/agent.md).
FROM node:24-bookworm-slim AS runtime-base
RUN apt-get update && apt-get install -y --no-install-recommends tini procps busybox-static && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /usr/local/lib/playbook && cp /bin/busybox /usr/local/lib/playbook/busybox

# The task containers' agent (agent/agent.c), static with musl so that it runs in any image: glibc,
# musl or no libc at all. What the SBOM says of musl (linked into it) is written beside it.
FROM node:24-bookworm-slim AS agent
RUN apt-get update && apt-get install -y --no-install-recommends gcc musl-tools && rm -rf /var/lib/apt/lists/*
COPY agent/agent.c /src/agent/
COPY tools/build-agent.sh /src/tools/
RUN PLAYBOOK_AGENT_OUT=/out /src/tools/build-agent.sh \
 && mkdir -p /sbom-input/linked/musl \
 && dpkg-query -W -f='${Version}\n' musl-dev > /sbom-input/linked/musl/version \
 && cp /usr/share/doc/musl/copyright /sbom-input/linked/musl/copyright \
 && echo /usr/local/lib/playbook/agent > /sbom-input/linked/musl/into

# What the image's SBOM lists beside the bundle, read inside that same root: the packages dpkg has
# installed, Node's version and the npm packages installed with it, and the packages' copyright
# files (scripts/image-sbom.ts merges them in the build stage, which has zod).
FROM runtime-base AS image-packages
RUN mkdir -p /sbom-input/node_modules \
 && dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n' > /sbom-input/dpkg-packages.tsv \
 && node --version > /sbom-input/node-version \
 && cp /etc/os-release /sbom-input/os-release \
 && cp -a /usr/share/doc /sbom-input/doc \
 && cd /usr/local/lib/node_modules \
 && for f in */package.json @*/*/package.json; do if [ -f "$f" ]; then cp --parents "$f" /sbom-input/node_modules/ || exit 1; fi; done

FROM node:24-bookworm-slim AS build
WORKDIR /src
# Dependencies first, so that a change in src/ reuses this layer instead of installing again.
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY scripts/bundle-cli.ts scripts/third-party-notices.ts scripts/image-sbom.ts ./scripts/
# tsc checks the types (and compiles the bundler's script); the bundle is the whole command with
# every npm dependency in it, so the image needs no node_modules.
RUN npx tsc -p tsconfig.build.json && node dist/scripts/bundle-cli.js
# The image's SBOM: the bundle's, plus what image-packages found in the runtime's root.
COPY --from=image-packages /sbom-input /tmp/sbom-input
COPY --from=agent /sbom-input/linked /tmp/sbom-input/linked
RUN node dist/scripts/image-sbom.js /tmp/sbom-input dist/bin/sbom.cdx.json dist/bin/sbom.image.cdx.json

FROM runtime-base
WORKDIR /opt/playbook
# The bundle's entry and the chunks it loads, without their source maps.
COPY --from=build /src/dist/bin/*.js /src/dist/bin/*.cjs ./bin/
# The project's licence, and the licences of the packages the bundle inlines with its SBOM (written
# by the bundler from its source maps), where Debian keeps a package's licence files; beside them
# the image's SBOM (the bundle's packages, the Debian packages, Node).
COPY LICENSE /usr/share/doc/playbook-controller/
COPY --from=build /src/dist/bin/THIRD-PARTY-NOTICES.txt /src/dist/bin/sbom.cdx.json /src/dist/bin/sbom.image.cdx.json /usr/share/doc/playbook-controller/
# The agent, beside the busybox of runtime-base (busybox-static's copyright file is in
# /usr/share/doc/busybox-static); musl's copyright file, for the musl linked into the agent.
COPY --from=agent /out/agent /usr/local/lib/playbook/agent
COPY --from=agent /usr/share/doc/musl/copyright /usr/share/doc/playbook-controller/agent/musl/copyright
RUN ln -s /opt/playbook/bin/playbook.js /usr/local/bin/playbook \
 && mkdir compile-cache cache && chown 65532:65532 compile-cache cache && chmod 700 cache
USER 65532:65532
# Node's compile cache, filled here by the commands a pod and a local run start with, so that they
# start from compiled code. Node keeps a folder per user in it: the image's user fills it. The code
# cache of run, validate and pod-runner goes to the user's cache folder (src/cli/code-cache.ts),
# one the image's user owns and no one else can write (the user has no home here).
# The controller's chunk loads and stops at the missing kubeconfig: enough to compile it.
ENV NODE_COMPILE_CACHE=/opt/playbook/compile-cache XDG_CACHE_HOME=/opt/playbook/cache
RUN printf '%s\n' 'apiVersion: playbook.dev/v1alpha1' 'kind: Playbook' 'metadata: {name: warm}' \
      'spec: {tasks: [{name: warm, run: "true"}]}' > /tmp/warm.yaml \
 && playbook --version && playbook validate -f /tmp/warm.yaml && playbook run -f /tmp/warm.yaml -o json >/dev/null \
 && { KUBECONFIG=/nonexistent playbook controller 2>/dev/null || true; } \
 && rm /tmp/warm.yaml
ENTRYPOINT ["/usr/bin/tini", "--", "playbook"]
CMD ["--help"]
