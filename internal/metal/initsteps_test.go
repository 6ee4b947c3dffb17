package metal

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// The boot's order is its behaviour: a step moved is a change to review, not a refactor.
func TestInitStepsOrder(t *testing.T) {
	var names []string
	for _, s := range initSteps(&initBoot{}) {
		names = append(names, s.name)
	}

	want := []string{
		"mountKernelFilesystems", "openKernelLog", "readCmdline", "loadModules", "measureInitrd",
		"platformNetwork", "setHostname", "leaveInitrd", "mountDisk", "startTheWorld", "chooseSlot",
		"machineConfig", "writePlatform", "buildMetalRoot", "execMachined",
	}
	if !slices.Equal(names, want) {
		t.Fatalf("init steps:\n got %v\nwant %v", names, want)
	}
}

func TestRunInitStepsStopsAtTheFailingStep(t *testing.T) {
	broken := errors.New("no such device")

	var ran []string

	step := func(name string, err error) initStep {
		return initStep{name, func() error { ran = append(ran, name); return err }}
	}

	err := runInitSteps([]initStep{step("first", nil), step("second", broken), step("third", nil)})
	if !errors.Is(err, broken) {
		t.Fatalf("the step's error is not wrapped: %v", err)
	}

	if !strings.Contains(err.Error(), "init step second:") {
		t.Fatalf("the error does not name its step: %v", err)
	}

	if !slices.Equal(ran, []string{"first", "second"}) {
		t.Fatalf("ran %v: the steps after a failure must not run", ran)
	}

	ran = nil
	if err = runInitSteps([]initStep{step("first", nil), step("third", nil)}); err != nil || len(ran) != 2 {
		t.Fatalf("a boot without failures: ran %v, error %v", ran, err)
	}
}
