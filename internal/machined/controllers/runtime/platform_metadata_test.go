package runtime_test

import (
	"testing"

	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	runtimectrl "github.com/talos-go/talos/internal/machined/controllers/runtime"
)

func TestPlatformMetadataController(t *testing.T) {
	spec := runtimeres.PlatformMetadataSpec{Platform: "nocloud", Hostname: "node-1", InstanceID: "i-1", Region: "lab", Zone: "rack-2"}
	e := ctest.Start(t, &runtimectrl.PlatformMetadataController{Spec: spec})

	ctest.AssertResource(e, runtimeres.PlatformMetadataID, func(r *runtimeres.PlatformMetadata, a *assert.Assertions) {
		a.Equal(spec, *r.TypedSpec())
	})
}
