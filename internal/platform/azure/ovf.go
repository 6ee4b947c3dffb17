package azure

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"strings"
)

// OVFEnv is the provisioning document Azure puts at the root of the disc in the VM's CD-ROM
// drive (UDF). Its elements are in the OVF and Windows Azure namespaces; only local names are
// matched.
const OVFEnv = "ovf-env.xml"

// ovfEnvironment is what the node reads of ovf-env.xml: the VM's custom data, base64.
type ovfEnvironment struct {
	XMLName    xml.Name `xml:"Environment"`
	CustomData string   `xml:"ProvisioningSection>LinuxProvisioningConfigurationSet>CustomData"`
}

// ParseOVFEnv returns the custom data (the machine config) of an ovf-env.xml; nil when the VM
// was given none.
func ParseOVFEnv(b []byte) ([]byte, error) {
	var env ovfEnvironment
	if err := xml.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("not an OVF Environment document: %w", err)
	}

	data := strings.Join(strings.Fields(env.CustomData), "") // the base64 may be wrapped
	if data == "" {
		return nil, nil
	}

	config, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return nil, fmt.Errorf("ProvisioningSection.LinuxProvisioningConfigurationSet.CustomData: not base64 (%w): Azure encodes the custom data given to the VM", err)
	}

	return config, nil
}
