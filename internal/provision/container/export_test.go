package container

// What the external tests use.
var (
	Geteuid     = &geteuid
	NoteCgroups = noteCgroups
)
