//! The sample's vocabulary: names, places, products, review texts. Data only; non-ASCII on
//! purpose (accents, `ß`, `✓`, Japanese), so every reader meets UTF-8.

pub(super) const FIRST_NAMES: &[&str] = &[
    "Anna", "Ben", "Chloé", "David", "Elif", "Fatima", "Giulia", "Hans", "Inès", "Jonas", "Karin", "Lucas", "Maëlle",
    "Noah", "Olga", "Pedro", "Quentin", "Rosa", "Sven", "Tomás", "Ursula", "Víctor", "Wiebke", "Yusuf", "Zoë",
];
pub(super) const LAST_NAMES: &[&str] = &[
    "Andersen",
    "Bauer",
    "Costa",
    "Dubois",
    "Eriksson",
    "Fischer",
    "García",
    "Horvath",
    "Ivanova",
    "Jensen",
    "Kowalski",
    "López",
    "Martin",
    "Nowak",
    "O'Brien",
    "Peeters",
    "Rossi",
    "Schmidt",
    "Tanaka",
    "Ünal",
    "Van Dijk",
    "Weiß",
    "Yılmaz",
    "Zieliński",
];
/// (city, ISO country, phone prefix)
pub(super) const CITIES: &[(&str, &str, &str)] = &[
    ("Paris", "FR", "+33"),
    ("Lyon", "FR", "+33"),
    ("Berlin", "DE", "+49"),
    ("München", "DE", "+49"),
    ("Madrid", "ES", "+34"),
    ("Lisboa", "PT", "+351"),
    ("Dublin", "IE", "+353"),
    ("Amsterdam", "NL", "+31"),
    ("Milano", "IT", "+39"),
    ("Kraków", "PL", "+48"),
    ("Zürich", "CH", "+41"),
    ("Göteborg", "SE", "+46"),
];
pub(super) const STREETS: &[&str] = &[
    "Main Street",
    "Rue de la Paix",
    "Hauptstraße",
    "Calle Mayor",
    "Via Roma",
    "Kungsgatan",
    "Nowy Świat",
    "Damrak",
    "Avenida da Liberdade",
];
pub(super) const USER_TAGS: &[&str] = &["vip", "newsletter", "beta", "wholesale"];
pub(super) const CATEGORIES: &[&str] = &["shoes", "apparel", "kitchen", "garden", "electronics", "toys", "books"];
pub(super) const NOUNS: [&[&str]; 7] = [
    &["Sneaker", "Boot", "Sandal", "Loafer", "Trail Runner"],
    &["T-Shirt", "Hoodie", "Jacket", "Jeans", "Dress"],
    &["Kettle", "Chef's Knife", "Pan", "Teapot", "Cutting Board"],
    &["Hose", "Planter", "Rake", "Bird House", "Lantern"],
    &["Headphones", "Charger", "Speaker", "Keyboard", "Webcam"],
    &["Puzzle", "Robot", "Plush Bear", "Kite", "Train Set"],
    &["Cookbook", "Novel", "Atlas", "Notebook", "Comic"],
];
pub(super) const ADJECTIVES: &[&str] = &[
    "Classic", "Organic", "Compact", "Deluxe", "Eco", "Vintage", "Smart", "Ultra", "Cozy", "Rugged", "Petite", "Grand",
];
pub(super) const PRODUCT_TAGS: &[&str] = &["organic", "eco", "bestseller", "new", "limited", "handmade", "sale"];
pub(super) const MATERIALS: &[&str] = &["organic", "cotton", "steel", "recycled", "bamboo", "leather"];
pub(super) const ORDER_STATUS: &[(&str, u64)] =
    &[("placed", 10), ("paid", 15), ("shipped", 20), ("delivered", 50), ("cancelled", 5)];
pub(super) const COUPONS: &[&str] = &["WELCOME10", "SPRING25", "FREESHIP", "VIP15", "BLACKFRIDAY"];
pub(super) const REVIEW_TITLES: &[&str] = &[
    "Great value",
    "Très bien ✓",
    "Not as described",
    "Five stars",
    "Works as expected",
    "Says \"perfect\" on the box \\ it isn't",
    "Günstig und gut",
    "完璧です",
    "Meh",
    "Would buy again",
];
pub(super) const REVIEW_SENTENCES: &[&str] = &[
    "Arrived quickly.",
    "The quality is better than I expected.",
    "Smaller than in the pictures.",
    "My kids love it.",
    "Packaging was damaged but the item was fine.",
    "Returned it after a week.",
    "Exactly what I needed.",
    "Colour is a bit off.",
    "Qualité au rendez-vous, livraison rapide.",
    "Würde ich wieder kaufen.",
];

/// Sales-tax rates as a writer that pads to three decimals spells them (canonical: 0.19 ...).
pub(super) const TAX_RATES: &[&str] = &["0.190", "0.200", "0.070", "0.250", "0.100"];
