package pins

import (
	"os"
	"strings"
	"testing"
)

func TestParseOverrides(t *testing.T) {
	got, err := Default.ParseOverrides(" MG-CONDITION-MAP-ORDER=fixed, ,MO-CLAIM-FINALIZE-STUCK=LIVE")
	if err != nil {
		t.Fatal(err)
	}
	if got["MG-CONDITION-MAP-ORDER"] != Fixed || got["MO-CLAIM-FINALIZE-STUCK"] != Live || len(got) != 2 {
		t.Fatalf("overrides = %v", got)
	}
	for in, want := range map[string]string{
		"MG-CONDITION-MAP-ORDER":        "has no '='",
		"NOPE=live":                     "not in the catalog",
		"MG-CONDITION-MAP-ORDER=broken": "must be live or fixed",
		"MG-CONDITION-MAP-ORDER=live,MG-CONDITION-MAP-ORDER=fixed": "twice",
	} {
		if _, err := Default.ParseOverrides(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseOverrides(%q) error = %v, want it to say %q", in, err, want)
		}
	}
}

func TestStates(t *testing.T) {
	mg := Default.States("MG-", map[string]State{"MG-CONDITION-MAP-ORDER": Fixed, "MG-UNNAMED-FIELD-OWNER": Live})
	if len(mg) != 7 {
		t.Fatalf("want the seven MG- defects, got %v", mg)
	}
	if mg["MG-CONDITION-MAP-ORDER"] || !mg["MG-UNNAMED-FIELD-OWNER"] || mg["MG-NO-REQUEUE-UNCONVERGED"] {
		t.Fatalf("states = %v", mg)
	}
	t.Setenv(EnvVar, "MG-NO-REQUEUE-UNCONVERGED=live")
	if st, err := Default.State("MG-NO-REQUEUE-UNCONVERGED"); err != nil || st != Live {
		t.Fatalf("State = %v, %v", st, err)
	}
	if st, err := Default.State("MG-CONDITION-MAP-ORDER"); err != nil || st != Live {
		t.Fatalf("State(default live) = %v, %v", st, err)
	}
}

// An OwnInstanceLive entry's pin runs the state opposite to the run's; any other entry's pin the run's.
func TestPinState(t *testing.T) {
	c := Catalog{{ID: "X-OWN", Default: Fixed, OwnInstanceLive: true}, {ID: "X-SHARED", Default: Fixed}}
	for env, want := range map[string][2]State{
		"":                           {Live, Fixed},
		"X-OWN=live,X-SHARED=live":   {Fixed, Live},
		"X-OWN=fixed,X-SHARED=fixed": {Live, Fixed},
	} {
		t.Setenv(EnvVar, env)
		own, err1 := c.PinState("X-OWN")
		shared, err2 := c.PinState("X-SHARED")
		if err1 != nil || err2 != nil || own != want[0] || shared != want[1] {
			t.Errorf("%s=%q: PinState = %v (%v), %v (%v), want %v, %v", EnvVar, env, own, err1, shared, err2, want[0], want[1])
		}
	}
	if _, err := c.PinState("NOPE"); err == nil {
		t.Error("PinState of an unknown ID returned no error")
	}
}

func TestCatalogIsComplete(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range Default {
		if seen[d.ID] {
			t.Errorf("%s listed twice", d.ID)
		}
		seen[d.ID] = true
		if d.Title == "" || d.Source == "" || len(d.Specs) == 0 || d.Retire == "" || (d.Default != Live && d.Default != Fixed) {
			t.Errorf("%s is incomplete: %+v", d.ID, d)
		}
		if d.OwnInstanceLive && d.Default != Fixed {
			t.Errorf("%s: OwnInstanceLive with Default %s: its pin's own instance would run it fixed", d.ID, d.Default)
		}
	}
	if len(Default) != 14 {
		t.Errorf("catalog has %d entries, the catalog lists 14", len(Default))
	}
}

func TestListingRoundTrips(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/pins.json"
	if err := WriteListing(p, Default); err != nil {
		t.Fatal(err)
	}
	l, err := ReadListing(p)
	if err != nil || l.Type != "pins.Catalog" || len(l.Entries) != len(Default) || l.Entries[6].OwnInstanceLive != Default[6].OwnInstanceLive {
		t.Fatalf("ReadListing = %+v, %v", l, err)
	}
	// A catalog of another type lists its type and no entries.
	if err := WriteListing(p, map[string]string{"X": "y"}); err != nil {
		t.Fatal(err)
	}
	if l, err := ReadListing(p); err != nil || l.Type != "map[string]string" || len(l.Entries) != 0 {
		t.Errorf("ReadListing of a map = %+v, %v", l, err)
	}
	if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadListing(p); err == nil || !strings.Contains(err.Error(), "holds no pin catalog listing") {
		t.Errorf("ReadListing of {} = %v", err)
	}
}
