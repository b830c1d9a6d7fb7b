# The runner and controller image. tini is PID 1 so that processes orphaned by tasks are reaped
# (Node does not reap children it did not spawn) when the image runs as it is. In the controller's
# pods the container command replaces this entrypoint; there the pod shares its PID namespace and
# the sandbox's pause process reaps instead.
FROM node:24-bookworm-slim AS build
WORKDIR /src
# Dependencies first, so that a change in src/ reuses this layer instead of installing again.
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
# Only src/ is compiled: the build config's other folders (benchmarks, test harness, scripts)
# are not copied in. The runtime keeps production dependencies alone, without their type
# declarations and source maps (a third of @kubernetes/client-node's size, never read at run time).
RUN npx tsc -p tsconfig.build.json && npm prune --omit=dev --ignore-scripts --no-audit --no-fund \
 && find node_modules -type f \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' \) -delete

FROM node:24-bookworm-slim
# tini reaps orphans; procps gives `ps` to whoever execs into a pod to look at its tasks.
RUN apt-get update && apt-get install -y --no-install-recommends tini procps && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/playbook
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist/src ./dist/src
COPY package.json ./
RUN ln -s /opt/playbook/dist/src/cli/main.js /usr/local/bin/playbook && chmod +x dist/src/cli/main.js
USER 65532:65532
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["playbook", "--help"]
