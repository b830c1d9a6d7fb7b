// A pod the controller did not create, never adopted on the real kubelet (foreign-pod.suite.ts), with the agent delivered by image-volume.
// One file per layout, so the two run side by side on the shared real node.
import { agentLayout } from "../harness/task-images.js";
import { foreignPodSuite } from "./foreign-pod.suite.js";

foreignPodSuite(agentLayout("image-volume"));
