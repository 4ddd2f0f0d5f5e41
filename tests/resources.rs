//! End-to-end ground truth for every resource event kind (switch, rss, block, vfs, net, lifecycle).
