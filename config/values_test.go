package config

import "testing"

func TestDecimalText(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"0.01", "0.01", ""},
		{" 10 ", "10", ""},
		{"", "", ""},
		{"0", "0", ""}, // text is valid; positivity is checked by Validate
		{"007.50", "007.50", ""},
		{"1e-2", "", `decimal "1e-2": want plain decimal notation such as "0.01" or "10"`},
		{".5", "", `decimal ".5": want plain decimal notation such as "0.01" or "10"`},
		{"5.", "", `decimal "5.": want plain decimal notation such as "0.01" or "10"`},
		{"+1", "", `decimal "+1": want plain decimal notation such as "0.01" or "10"`},
		{"NaN", "", `decimal "NaN": want plain decimal notation such as "0.01" or "10"`},
		{"1.2.3", "", `decimal "1.2.3": want plain decimal notation such as "0.01" or "10"`},
		{"١", "", `decimal "١": want plain decimal notation such as "0.01" or "10"`},
		{"99999999999999999999", "99999999999999999999", ""},
		{"000099999999999999999999", "000099999999999999999999", ""},
		{"100000000000000000000", "", `decimal "100000000000000000000": more than 20 integer digits`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var d Decimal
			err := d.UnmarshalText([]byte(tt.in))
			switch {
			case tt.err != "" && (err == nil || err.Error() != tt.err):
				t.Errorf("error = %v, want %s", err, tt.err)
			case tt.err == "" && err != nil:
				t.Errorf("error = %v", err)
			case tt.err == "" && string(d) != tt.want:
				t.Errorf("= %q, want %q", d, tt.want)
			}
			if tt.err == "" {
				b, _ := d.MarshalText()
				if string(b) != tt.want || d.IsSet() != (tt.want != "") {
					t.Errorf("MarshalText = %q, IsSet = %v", b, d.IsSet())
				}
			}
		})
	}
	if v := Decimal("0.000010").Value(); v.String() != "0.00001" {
		t.Errorf("Value() = %s", v)
	}
}
