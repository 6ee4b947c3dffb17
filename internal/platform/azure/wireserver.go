package azure

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"

	"github.com/talos-go/talos/internal/platform"
)

// The wire server's protocol, as the Azure Linux agent speaks it: every request carries the
// agent's name and the protocol version, and its bodies are XML.
func wireHeader() http.Header {
	return http.Header{
		"X-Ms-Agent-Name": {"WALinuxAgent"},
		"X-Ms-Version":    {"2015-04-05"},
		"Content-Type":    {"text/xml;charset=utf-8"},
	}
}

// GoalState is what the node reads of the wire server's goal state: the three values a health
// report echoes.
type GoalState struct {
	Incarnation string `xml:"Incarnation"`
	ContainerID string `xml:"Container>ContainerId"`
	InstanceID  string `xml:"Container>RoleInstanceList>RoleInstance>InstanceId"`
}

// ParseGoalState reads a GoalState document; each of the three values must be there.
func ParseGoalState(b []byte) (GoalState, error) {
	var gs struct {
		XMLName xml.Name `xml:"GoalState"`
		GoalState
	}

	if err := xml.Unmarshal(b, &gs); err != nil {
		return GoalState{}, fmt.Errorf("not a GoalState document: %w", err)
	}

	for _, f := range []struct{ name, value string }{
		{"Incarnation", gs.Incarnation}, {"Container.ContainerId", gs.ContainerID}, {"Container.RoleInstanceList.RoleInstance.InstanceId", gs.InstanceID},
	} {
		if f.value == "" {
			return GoalState{}, fmt.Errorf("GoalState.%s: missing", f.name)
		}
	}

	return gs.GoalState, nil
}

// health is the report that the role instance is Ready for the goal state's incarnation.
type health struct {
	XMLName     xml.Name `xml:"Health"`
	Xsi         string   `xml:"xmlns:xsi,attr"`
	Xsd         string   `xml:"xmlns:xsd,attr"`
	Incarnation string   `xml:"GoalStateIncarnation"`
	ContainerID string   `xml:"Container>ContainerId"`
	Role        struct {
		InstanceID string `xml:"InstanceId"`
		State      string `xml:"Health>State"`
	} `xml:"Container>RoleInstanceList>Role"`
}

// HealthReport is the XML body reporting the goal state's role instance Ready.
func HealthReport(gs GoalState) ([]byte, error) {
	h := health{Xsi: "http://www.w3.org/2001/XMLSchema-instance", Xsd: "http://www.w3.org/2001/XMLSchema", Incarnation: gs.Incarnation, ContainerID: gs.ContainerID}
	h.Role.InstanceID, h.Role.State = gs.InstanceID, "Ready"

	b, err := xml.Marshal(h)
	if err != nil {
		return nil, err
	}

	return append([]byte(xml.Header), b...), nil
}

// ReportReady tells the wire server at base that the VM is up: Azure counts a VM as
// provisioned, and stops waiting for it, only when its agent has reported Ready. The goal state
// (GET /machine/?comp=goalstate) names the incarnation, container and instance the health
// report (POST /machine/?comp=health) is about.
func ReportReady(ctx context.Context, env platform.Env, base string) error {
	b, err := env.Do(ctx, platform.Request{URL: base + "/machine/?comp=goalstate", Header: wireHeader()})
	if err != nil {
		return fmt.Errorf("fetching the goal state: %w", err)
	}

	gs, err := ParseGoalState(b)
	if err != nil {
		return fmt.Errorf("the goal state of %s: %w", base, err)
	}

	report, err := HealthReport(gs)
	if err != nil {
		return err
	}

	if _, err = env.Do(ctx, platform.Request{Method: http.MethodPost, URL: base + "/machine/?comp=health", Header: wireHeader(), Body: report}); err != nil {
		if errors.Is(err, platform.ErrNotFound) {
			return fmt.Errorf("posting the health report: %w (is %s Azure's wire server?)", err, base)
		}

		return fmt.Errorf("posting the health report: %w", err)
	}

	return nil
}
