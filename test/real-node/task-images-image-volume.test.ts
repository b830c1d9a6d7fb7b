// Tasks in their own images on the real node (task-images.suite.ts), with the agent delivered by image-volume.
// One file per layout, so the two run side by side on the shared real node.
import { agentLayout } from "../harness/task-images.js";
import { taskImagesSuite } from "./task-images.suite.js";

taskImagesSuite(agentLayout("image-volume"));
