package qemu

// What the external tests use.
var Geteuid = &geteuid
